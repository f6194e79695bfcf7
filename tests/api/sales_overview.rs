//! `GET /admin/sales` (what the live page polls) and `GET /admin` (the page itself).

use std::time::Duration;

use futures::StreamExt;
use seckill::http::routes::{SaleStatus, SalesOverview};
use seckill::limiter::RateLimit;
use sqlx::{Connection, PgConnection};

use crate::common::postgres_url;
use crate::helpers::{ADMIN_TOKEN, TestApp, assert_error, new_sale_id, spawn_app, spawn_app_with};

async fn overview(app: &TestApp) -> SalesOverview {
    let response = app.client.get(app.url("/admin/sales")).bearer_auth(ADMIN_TOKEN).send().await.unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test]
async fn the_overview_lists_every_sale_by_id_as_its_status_reads_it_and_the_limiters_refusals() {
    let app = spawn_app_with(|c| c.rate_limit = RateLimit { limit: 2, window: Duration::from_secs(60) }, true).await;
    assert_eq!(overview(&app).await.sales, vec![], "no sale yet");
    let base = new_sale_id();
    let ids = [format!("{base}-b"), format!("{base}-a"), format!("{base}-c")];
    for (stock, id) in [5, 3, 0].into_iter().zip(&ids) {
        app.seed_stock(id, stock).await;
    }
    assert_eq!(app.buy(&ids[1], "alice").await.status(), 201);
    assert_eq!(app.buy(&ids[1], "bob").await.status(), 201);
    assert_error(app.buy(&ids[1], "carol").await, 429, "rate_limited").await; // by Redis
    assert_error(app.buy(&ids[1], "dave").await, 429, "rate_limited").await; // from memory
    app.wait_for_drain(&ids[1]).await;

    let before = time::OffsetDateTime::now_utc();
    let overview = overview(&app).await;

    let listed: Vec<&str> = overview.sales.iter().map(|s| s.sale_id.as_str()).collect();
    assert_eq!(listed, [&ids[1], &ids[0], &ids[2]], "sorted by id");
    assert_eq!(overview.sales_total, 3);
    for sale in &overview.sales {
        assert_eq!(sale, &app.status(&sale.sale_id).await, "the same as GET /admin/sales/{{id}}");
    }
    let a = &overview.sales[0];
    assert_eq!((a.stock_initial, a.stock_left, a.sold, a.persisted, a.queued), (3, 1, 2, Some(2), 0));
    assert_eq!((overview.limiter.refused, overview.limiter.refused_from_memory), (1, 1));
    let age = before - overview.sampled_at;
    assert!(age.abs() < time::Duration::seconds(5), "sampled now: {}", overview.sampled_at);
}

/// A registered sale whose state Redis lost is reported as such, not left out of the list while
/// the count still has it (the live page said "showing 1 of 2" and showed no problem).
#[tokio::test]
async fn a_sale_redis_lost_is_reported_in_the_overview() {
    let app = spawn_app().await;
    let [kept, lost] = ["kept", "lost"].map(|name| format!("{}-{name}", new_sale_id()));
    for sale in [&kept, &lost] {
        app.seed_stock(sale, 3).await;
    }
    crate::redis_loss::lose_sale(&app, &lost).await;
    let overview = overview(&app).await;
    assert_eq!((overview.sales.len(), overview.sales_total), (1, 2));
    assert_eq!(overview.unreadable.len(), 1, "{:?}", overview.unreadable);
    assert_eq!(overview.unreadable[0].sale_id, lost);
    assert!(overview.unreadable[0].error.contains("lost"), "{:?}", overview.unreadable);
}

#[tokio::test]
async fn the_overview_lists_the_first_hundred_sales_and_counts_them_all() {
    let app = spawn_app_with(|_| {}, false).await;
    let base = new_sale_id();
    let ids: Vec<String> = (0..101).map(|i| format!("{base}-{i:03}")).collect();
    futures::stream::iter(&ids).for_each_concurrent(8, |id| app.seed_stock(id, 1)).await;

    let overview = overview(&app).await;

    assert_eq!(overview.sales_total, 101);
    let listed: Vec<&str> = overview.sales.iter().map(|s| s.sale_id.as_str()).collect();
    assert_eq!(listed, ids[..100].iter().map(String::as_str).collect::<Vec<_>>(), "the first 100 by id");
}

#[tokio::test]
async fn no_sample_during_a_storm_shows_a_sold_order_that_is_neither_queued_nor_persisted() {
    let app = spawn_app().await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 600).await;
    let storm = futures::stream::iter(0..800)
        .map(|i| {
            let app = &app;
            let sale = &sale;
            async move { app.buy(sale, &format!("u{i}")).await.status().as_u16() }
        })
        .buffer_unordered(32)
        .collect::<Vec<u16>>();
    let samples = async {
        let mut samples: Vec<SaleStatus> = vec![];
        let until = std::time::Instant::now() + Duration::from_secs(60);
        loop {
            samples.push(app.status(&sale).await);
            samples.extend(overview(&app).await.sales);
            let last = samples.last().unwrap();
            if last.queued == 0 && last.persisted == Some(600) {
                return samples;
            }
            assert!(std::time::Instant::now() < until, "the queue never drained: {last:?}");
        }
    };

    let (statuses, samples) = tokio::join!(storm, samples);

    assert_eq!(statuses.iter().filter(|s| **s == 201).count(), 600);
    let busy = samples.iter().filter(|s| s.queued > 0).count();
    assert!(busy >= 2, "sampled while orders were queued: {busy} of {}", samples.len());
    for s in &samples {
        let persisted = s.persisted.expect("Postgres is up");
        assert!(s.sold - s.queued <= persisted, "a sold order is neither queued nor persisted: {s:?}");
        assert_eq!(s.stock_initial, s.stock_left + s.sold, "{s:?}");
    }
}

#[tokio::test]
async fn while_postgres_is_unreachable_the_overview_still_answers_without_the_persisted_counts() {
    let app = spawn_app_with(|_| {}, false).await;
    let sale = new_sale_id();
    app.seed_stock(&sale, 4).await;
    assert_eq!(app.buy(&sale, "alice").await.status(), 201);

    // Take the app's database away: close its connections and rename it until no pool reconnects.
    let url = app.config.database_url.clone();
    let database = secrecy::ExposeSecret::expose_secret(&url).rsplit_once('/').unwrap().1.to_owned();
    let mut maintenance = PgConnection::connect(&postgres_url()).await.unwrap();
    let terminate = "select pg_terminate_backend(pid) from pg_stat_activity where datname = $1";
    let until = std::time::Instant::now() + Duration::from_secs(60);
    let renamed = loop {
        assert!(std::time::Instant::now() < until, "the app's pool kept reconnecting to {database}");
        sqlx::query(terminate).bind(&database).execute(&mut maintenance).await.unwrap();
        let rename = format!("alter database {database} rename to {database}_away");
        if sqlx::query(&rename).execute(&mut maintenance).await.is_ok() {
            break format!("{database}_away");
        }
    };

    let overview = overview(&app).await;
    assert_eq!(overview.sales.len(), 1);
    let s = &overview.sales[0];
    assert_eq!((s.sold, s.persisted, s.queued), (1, None, 1), "Redis still answers; Postgres is unknown");
    assert_eq!(app.status(&sale).await.persisted, None);

    sqlx::query(&format!("alter database {renamed} rename to {database}")).execute(&mut maintenance).await.unwrap();
}

#[tokio::test]
async fn the_page_is_served_without_a_token_with_a_strict_content_security_policy() {
    let app = spawn_app_with(|_| {}, false).await;

    let response = app.client.get(app.url("/admin")).send().await.unwrap();

    assert_eq!(response.status(), 200);
    let headers = response.headers().clone();
    assert_eq!(headers["content-type"], "text/html; charset=utf-8");
    assert_eq!(headers["cache-control"], "no-store");
    let csp = headers["content-security-policy"].to_str().unwrap();
    assert!(csp.starts_with("default-src 'none'; script-src 'sha256-"), "{csp}");
    assert!(csp.contains("connect-src 'self'") && !csp.contains("unsafe"), "{csp}");
    let page = response.text().await.unwrap();
    assert!(page.contains("<title>seckill · live sales</title>"));
    assert!(page.contains("sessionStorage") && !page.contains("localStorage"), "the token stays in the tab");
    assert!(!page.contains(ADMIN_TOKEN));
}
