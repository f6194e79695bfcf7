//! The worker's insert of a batch's orders into Postgres: at most its batch of orders a statement
//! (an entry may hold a call's many orders, issue 54), each statement idempotent; the caller
//! acknowledges the entries after the last; and which of the batch's sales are sold out in Redis
//! (the hint for the `sale.sold_out` events).

use std::collections::HashSet;

use anyhow::Context;
use tracing::Instrument;

use super::Worker;
use crate::db;
use crate::domain::{Order, SaleId};

impl Worker {
    /// While events are written (the last insert's `hooked`), the batch's sales whose Redis
    /// stock is gone (a `GET` per sale of the batch, usually one): the only ones whose
    /// `sale.sold_out` the insert checks, a check that sums the sale's orders and would cost a
    /// sale still selling that sum on every batch. `None` (the insert checks every sale of the
    /// batch, if an endpoint is registered) otherwise, or when Redis does not answer. A sale whose
    /// units come back before its last orders are stored may miss its event (docs/webhooks.md).
    pub(super) async fn sold_out_in_redis(&self, orders: &[Order]) -> Option<HashSet<String>> {
        if !self.hooked {
            return None;
        }
        let mut sales: Vec<&SaleId> = orders.iter().map(|o| &o.sale_id).collect();
        sales.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        sales.dedup();
        let mut con = self.redis.clone();
        let mut gone = HashSet::new();
        // One GET per sale, each in its own slot (a cluster refuses a pipeline across slots).
        for sale in sales {
            let stock: Option<i64> =
                redis::cmd("GET").arg(self.sales.keyspace().sale_keys(sale).stock).query_async(&mut con).await.ok()?;
            if stock.is_none_or(|left| left <= 0) {
                gone.insert(sale.as_str().to_owned());
            }
        }
        Some(gone)
    }

    /// Inserts `orders` in statements of at most `batch` orders, each within the insert timeout
    /// and inside `span`; answers their reports as one.
    pub(super) async fn insert(&mut self, orders: &[Order], span: tracing::Span) -> anyhow::Result<db::InsertReport> {
        let may_sell_out = self.sold_out_in_redis(orders).await;
        let mut report = db::InsertReport { hooked: self.hooked, ..db::InsertReport::default() };
        for chunk in orders.chunks(self.settings.batch.max(1)) {
            let hint = if report.hooked { db::Hint::Hooked(may_sell_out.as_ref()) } else { db::Hint::Quiet };
            let insert = db::insert_orders(&self.pool, chunk, hint).instrument(span.clone());
            let part = tokio::time::timeout(self.settings.insert_timeout, insert)
                .await
                .map_err(|_| anyhow::anyhow!("no answer within {:?}", self.settings.insert_timeout))
                .and_then(|r| r.map_err(anyhow::Error::from))
                .context("inserting orders")?;
            report.inserted += part.inserted;
            report.already_stored += part.already_stored;
            report.conflicts.extend(part.conflicts);
            report.hooked = part.hooked;
        }
        Ok(report)
    }
}
