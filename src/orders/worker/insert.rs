//! The worker's insert of a batch's orders into Postgres: at most its batch of orders a statement
//! (an entry may hold a call's many orders, issue 54), each statement idempotent; the caller
//! acknowledges the entries after the last.

use anyhow::Context;
use tracing::Instrument;

use super::Worker;
use crate::db;
use crate::domain::Order;

impl Worker {
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
