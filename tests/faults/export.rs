//! An export of 100,000 orders streams from a `seckill serve` process whose resident memory grows
//! by less than 64 MiB, and its rows are Postgres's, in order.

use std::time::Instant;

use crate::common::ADMIN_TOKEN;
use crate::harness::Deployment;
use crate::lifecycle::rss_kib;

const ORDERS: i64 = 100_000;
const MAX_GROWTH_KIB: u64 = 64 * 1024;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_export_of_100_000_orders_streams_in_bounded_memory_and_equals_postgres() {
    let mut deployment = Deployment::new(&[]).await;
    let (service, sale) = deployment.start_with_sale(1).await;
    // The orders are written straight into Postgres (the export reads only Postgres): a tenth
    // paid, the rest confirmed, buyers' ids in key order.
    sqlx::query(
        "insert into orders (order_id, sale_id, user_id, created_at, status, pay_by, quantity)
         select gen_random_uuid(), $1, 'buyer-' || lpad(i::text, 6, '0'), now(),
                case when i % 10 = 0 then 'paid' else 'confirmed' end,
                case when i % 10 = 0 then now() end, 1 + i % 3
         from generate_series(1, $2) as i",
    )
    .bind(&sale)
    .bind(ORDERS)
    .execute(&deployment.pool)
    .await
    .unwrap();
    let export = |query: &str| {
        deployment
            .client
            .get(deployment.url(&format!("/admin/sales/{sale}/orders{query}")))
            .bearer_auth(ADMIN_TOKEN)
            .send()
    };
    // Warm up: the code paths and buffers a small export uses are in memory before the baseline.
    let warm = export("?status=cancelled").await.unwrap().text().await.unwrap();
    assert_eq!(warm.lines().count(), 1, "only the header: {warm}");
    let before = rss_kib(&service);

    let started = Instant::now();
    let mut response = export("?format=csv").await.unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["content-type"], "text/csv; charset=utf-8");
    let (mut body, mut chunks, mut peak) = (Vec::new(), 0, before);
    while let Some(chunk) = response.chunk().await.unwrap() {
        body.extend_from_slice(&chunk);
        chunks += 1;
        peak = peak.max(rss_kib(&service));
    }
    let elapsed = started.elapsed();
    let text = String::from_utf8(body).unwrap();
    let mut lines = text.split_terminator("\r\n");
    assert!(lines.next().unwrap().starts_with("order_id,sale_id,user_id,quantity,status,"));
    let exported: Vec<(String, String, String, String)> = lines
        .map(|line| {
            let f: Vec<&str> = line.split(',').collect();
            (f[0].to_owned(), f[2].to_owned(), f[3].to_owned(), f[4].to_owned())
        })
        .collect();
    let stored: Vec<(String, String, String, String)> = sqlx::query_as(
        "select order_id::text, user_id, quantity::text, status from orders where sale_id = $1 order by user_id",
    )
    .bind(&sale)
    .fetch_all(&deployment.pool)
    .await
    .unwrap();
    assert_eq!(exported.len() as i64, ORDERS);
    assert!(exported == stored, "the export's rows are not Postgres's");

    let paid = export("?status=paid&format=ndjson").await.unwrap().text().await.unwrap();
    assert_eq!(paid.lines().count() as i64, ORDERS / 10);
    assert!(paid.lines().all(|l| serde_json::from_str::<serde_json::Value>(l).unwrap()["status"] == "paid"));

    let growth = peak.saturating_sub(before);
    eprintln!(
        "figures export: orders={ORDERS} bytes={} chunks={chunks} elapsed_ms={} rss_before_kib={before} \
         rss_peak_kib={peak} growth_kib={growth}",
        text.len(),
        elapsed.as_millis()
    );
    assert!(growth < MAX_GROWTH_KIB, "RSS grew by {growth} KiB streaming {ORDERS} orders");
}
