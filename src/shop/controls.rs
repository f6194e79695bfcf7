//! The sale-day controls: the kill switch (pause, resume, end now), stock on the fly, and the
//! audit trail that records them (`crate::controls`). Each control changes Redis inside a
//! Postgres transaction that records it: Postgres is reached first (an outage changes nothing),
//! Redis decides, and the row and the sale's record commit after it.

use serde_json::json;

use super::admin::SaleReport;
use super::sales::Existing;
use super::seed::MAX_STOCK;
use super::{Error, Shop};
use crate::controls::audit::{self, Entry, MAX_REASON_CHARS};
use crate::controls::{self, Restock, Switch};
use crate::db;
use crate::domain::{DropId, SaleId, ms_to_time};

impl Shop {
    /// Turns the sale's kill switch: `Pause` refuses every purchase from the purchase script's
    /// next call on (every instance at once: the script reads the switch in the purchase's own
    /// call) and stops its waiting room's admission; `Resume` lets them go on; `End` ends the sale
    /// now (Redis time), in Redis and in its Postgres record. Reservations and admissions keep
    /// their deadlines. Recorded in the audit with `actor`. Answers the sale's state after it.
    pub async fn switch(
        &self,
        sale: &SaleId,
        switch: Switch,
        reason: Option<&str>,
        actor: Option<&str>,
    ) -> Result<SaleReport, Error> {
        let reason = checked_reason(reason)?;
        self.live_now(sale).await?;
        let mut tx = self.pool.begin().await?;
        // The row's lock, held through the Redis calls: a seed of the sale holds it through its
        // own (which rewrites every shard's meta), so the two run one after the other and a seed
        // cannot undo, on some shards, a switch already answered (a retirement's mark takes it too).
        if db::lock_retired(&mut tx, sale.as_str()).await? {
            return Err(Error::SaleRetired);
        }
        let redis_reason = if switch == Switch::Pause { reason.unwrap_or_default() } else { "" };
        let Some(switched) = controls::switch(&self.sales, sale, switch, redis_reason).await? else {
            return Err(self.unknown_or_retired(sale).await);
        };
        let ends_at = switched.ends_at_ms.map(ms_to_time);
        if let (Switch::End, Some(ends_at)) = (switch, ends_at) {
            db::set_ended(&mut tx, sale, ends_at).await?;
        }
        let effect = json!({
            "was_paused": switched.was_paused,
            "paused": switch == Switch::Pause || (switched.was_paused && switch == Switch::End),
            "ends_at": audit::instant(ends_at),
            "shards": switched.shards,
        });
        audit::record(&mut tx, sale, switch.action(), reason, &effect, actor).await?;
        tx.commit().await?;
        self.board.invalidate(sale).await;
        tracing::info!(sale_id = %sale, action = switch.action(), reason, actor, "sale switched");
        self.sale_report(sale).await
    }

    /// Adds `add` units to the sale (takes `-add` unsold units back when negative): atomic with
    /// its purchases, `stock_initial` following in Redis and in the sale's Postgres record, and a
    /// sale that was sold out sells again on every instance (its sold-out flags are dropped
    /// through the events channel). Refused, with nothing changed, below 0 units left, beyond
    /// the largest stock, or for a sharded sale; `add` 0 changes and records nothing. Answers the
    /// sale's state after it.
    pub async fn restock(
        &self,
        sale: &SaleId,
        add: i64,
        reason: Option<&str>,
        actor: Option<&str>,
    ) -> Result<SaleReport, Error> {
        let reason = checked_reason(reason)?;
        if !(-MAX_STOCK..=MAX_STOCK).contains(&add) {
            return Err(Error::Invalid(format!("add must be an integer between -{MAX_STOCK} and {MAX_STOCK}")));
        }
        self.live_now(sale).await?;
        if add == 0 {
            return self.sale_report(sale).await; // nothing to change, nothing to record
        }
        if let Some(drop) = sale.group().and_then(|group| DropId::parse(group).ok()) {
            self.refuse_draw_restock(&drop).await?;
        }
        // The row's lock orders stock changes: each writes Redis's new stock_initial, so the
        // last one to commit is the latest. Under it, a retirement marked since the check above
        // refuses the change (the retirement's mark takes the same lock).
        let mut tx = self.pool.begin().await?;
        if db::lock_retired(&mut tx, sale.as_str()).await? {
            return Err(Error::SaleRetired);
        }
        let (stock_initial, stock_left) = match controls::restock(&self.sales, sale, add, MAX_STOCK).await? {
            Restock::Done { stock_initial, stock_left } => (stock_initial, stock_left),
            Restock::BelowZero { stock_left } => return Err(Error::StockBelowZero { stock_left }),
            Restock::TooMuch { stock_initial } => return Err(Error::StockTooLarge { stock_initial }),
            Restock::Sharded => return Err(Error::Sharded),
            Restock::Restoring => return Err(Error::SaleRestoring),
            Restock::UnknownSale => return Err(self.unknown_or_retired(sale).await),
        };
        self.sold_out.clear(sale.as_str());
        self.board.invalidate(sale).await;
        let recorded = async {
            sqlx::query("update sales set stock_initial = $2, updated_at = now() where sale_id = $1")
                .bind(sale.as_str())
                .bind(stock_initial)
                .execute(&mut *tx)
                .await?;
            let effect = json!({ "add": add, "stock_initial": stock_initial, "stock_left": stock_left });
            audit::record(&mut tx, sale, "stock", reason, &effect, actor).await?;
            tx.commit().await
        };
        if let Err(err) = recorded.await {
            // Redis changed and Postgres did not follow: reconciliation reports the sales row
            // until the next stock change (which writes Redis's figure) or a repair.
            tracing::error!(sale_id = %sale, add, stock_initial, error = %err,
                "stock changed in Redis but not recorded in Postgres");
            return Err(Error::NotRecorded(anyhow::Error::new(err).context("postgres")));
        }
        tracing::info!(sale_id = %sale, add, stock_initial, stock_left, actor, "stock changed");
        self.sale_report(sale).await
    }

    /// The sale's operator actions, newest first, at most `limit` (1 to
    /// [`audit::MAX_LISTED`]). A sale with none that Redis does not know is `unknown_sale`.
    pub async fn audit(&self, sale: &SaleId, limit: Option<i64>) -> Result<Vec<Entry>, Error> {
        self.existing_now(sale).await?;
        let entries = audit::list(&self.pool, sale, limit.unwrap_or(audit::MAX_LISTED)).await?;
        if entries.is_empty() && self.sales.layout(sale).await?.is_none() {
            return Err(self.unknown_or_retired(sale).await);
        }
        Ok(entries)
    }

    /// A sale a control can change: not retired, and not a made-up id (which then costs no
    /// Postgres transaction).
    async fn live_now(&self, sale: &SaleId) -> Result<(), Error> {
        match self.existing_now(sale).await? {
            Existing::Retired => Err(Error::SaleRetired),
            Existing::InRedis | Existing::Kept => Ok(()),
        }
    }
}

/// The operator's reason, at most [`MAX_REASON_CHARS`] characters; an empty one is none.
pub(super) fn checked_reason(reason: Option<&str>) -> Result<Option<&str>, Error> {
    match reason.map(str::trim) {
        Some(r) if r.chars().count() > MAX_REASON_CHARS => {
            Err(Error::Invalid(format!("reason must be at most {MAX_REASON_CHARS} characters")))
        }
        Some(r) if r.chars().any(char::is_control) => Err(Error::Invalid("reason must be one line of text".into())),
        Some("") | None => Ok(None),
        Some(r) => Ok(Some(r)),
    }
}
