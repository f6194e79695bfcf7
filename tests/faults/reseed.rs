//! Re-seeding a sale while buys are in flight never resets its stock under its buyers.

use futures::future::join_all;
use serde_json::json;

use crate::harness::Deployment;
use crate::storm_client::Storm;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reseeding_during_a_storm_never_resets_stock_under_buyers() {
    let mut deployment = Deployment::new(&[]).await;
    let (_service, sale) = deployment.start_with_sale(100).await;

    let storm = Storm::new(&deployment.address, &sale, 400, 800);
    // 40 re-seeds to a larger stock race the buyers; each is refused once anyone has bought.
    let reseeds = join_all((0..40).map(|_| deployment.seed(&sale, json!({"stock": 1_000}))));
    let (report, reseeds) = tokio::join!(storm.run(), reseeds);

    let mut answers = std::collections::BTreeMap::<u16, usize>::new();
    for response in reseeds {
        *answers.entry(response.status().as_u16()).or_default() += 1;
    }
    assert!(answers.keys().all(|s| [200, 409].contains(s)), "re-seed answers: {answers:?}");
    assert_eq!(report.server_errors(), 0, "{:?}", report.server_error_bodies);
    let status = deployment.assert_invariants(&sale, &report.confirmed).await;
    assert_eq!(status.sold as usize, report.count(201), "every sale was answered 201");
    assert!([100, 1_000].contains(&status.stock_initial), "{status:?}");
    assert_eq!(deployment.sales_row_stock(&sale).await, status.stock_initial, "Postgres records the stock Redis holds");
    // The last word on stock: a re-seed accepted after the first purchase would break (a) above,
    // and once buyers exist every re-seed is refused.
    let late = deployment.seed(&sale, json!({"stock": 5_000})).await;
    assert_eq!(late.status(), 409);
    eprintln!(
        "figures reseed: buys={} sold={} stock_initial={} reseeds={answers:?}",
        report.sent, status.sold, status.stock_initial
    );
}
