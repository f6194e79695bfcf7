//! A drop's use cases (`crate::drops`): seed or update it whole, read it (the operator's report and
//! the public view), its one switch, its stock, its audit trail. Each change is one Redis call
//! inside one Postgres transaction that records it with one audit entry: Postgres is reached first
//! (an outage changes nothing), Redis decides, and the rows commit after it.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::sync::Arc;

use serde_json::json;
use time::OffsetDateTime;

use super::DrawOrder;
use super::admin::SaleReport;
use super::controls::checked_reason;
use super::limits::Meter;
use super::seed::{MAX_STOCK, checked_per_buyer, checked_stock, checked_times, checked_window, to_ms};
use super::{Error, Shop};
use crate::admission::{self, LineId};
use crate::controls::Switch;
use crate::controls::audit::{self, Entry};
use crate::db;
use crate::domain::{DropId, SaleId, ms_to_time};
use crate::draw::entries::{self as draw_entries, DrawInfo, store as draw_store};
use crate::drops::{self, DropRestock, DropSeed, DropSpec, MAX_SIZES, NotSwitched, store};
use crate::purchase::board::Snapshot;
use crate::redis::keys::LineKeys;
use crate::reservations::store as reservations_store;

/// What an operator asks a drop's seed for, as the request said it (checked by
/// [`Shop::seed_drop`]).
#[derive(Debug, Clone, Default)]
pub struct DropOrder {
    /// Each size's name (`40`: the sale `<drop>.40`) and its stock.
    pub sizes: BTreeMap<String, i64>,
    /// Units one buyer may buy across the sizes; `None`: 1.
    pub per_buyer: Option<u32>,
    pub starts_at: Option<OffsetDateTime>,
    pub ends_at: Option<OffsetDateTime>,
    /// The payment window as written (`"15m"`); `None`: `SECKILL_PAYMENT_WINDOW`'s.
    pub payment_window: Option<String>,
    /// The drop's one line: when it opens and buyers admitted per second.
    pub waiting_room: Option<(OffsetDateTime, u32)>,
    /// The proof of work (`Some(0)`: none); `None`: `SECKILL_CHALLENGE_COST`'s.
    pub challenge: Option<u32>,
    /// Draw mode: entries for a window instead of purchases (`crate::draw`).
    pub draw: Option<DrawOrder>,
}

/// A drop whole, as the operator reads it: each size's report (Redis's state, Postgres's counts)
/// by size name, and the Redis server's time at the read.
#[derive(Debug, Clone)]
pub struct DropReport {
    pub drop: DropId,
    pub sizes: Vec<(String, SaleReport)>,
    pub server_time_ms: i64,
    /// The drop's draw, in draw mode.
    pub draw: Option<DrawInfo>,
}

/// A drop whole, as the public reads it: each size's snapshot (this instance's, at most 200 ms
/// old), by size name.
#[derive(Debug, Clone)]
pub struct DropView {
    pub drop: DropId,
    pub sizes: Vec<(String, Arc<Snapshot>)>,
    /// The drop's draw, in draw mode (read afresh: its entries' count moves).
    pub draw: Option<DrawInfo>,
    /// The drop's line, as this instance read it (at most once per tick, shared with its polls;
    /// `None` while unreadable): the public view commits to its shuffle seed, then shows it.
    pub line: Option<Arc<admission::line::Line>>,
}

impl Shop {
    /// Seeds or updates the whole drop: every size (`<drop>.<size>`), the group's limit and window,
    /// and the drop's line, in one Redis call inside one Postgres transaction (every size's `sales`
    /// row, the `drops` row and one audit entry). An update may add sizes and change every stock
    /// and setting until the drop has a buyer; it may not remove a size, nor re-seed a drop with
    /// buyers (`drop_in_progress`), nor take over a group seeded sale by sale (`not_a_drop`), nor
    /// change a draw's terms (`draw_stock_fixed`).
    pub async fn seed_drop(&self, drop: &DropId, order: DropOrder, actor: Option<&str>) -> Result<DropReport, Error> {
        let DropOrder { sizes, per_buyer, starts_at, ends_at, payment_window, waiting_room, challenge, draw } = order;
        if sizes.is_empty() || sizes.len() > MAX_SIZES {
            return Err(Error::Invalid(format!("sizes must name 1 to {MAX_SIZES} sizes")));
        }
        let sizes = sizes
            .into_iter()
            .map(|(size, stock)| {
                checked_stock(&format!("sizes.{size}.stock"), stock)?;
                Ok((drop.size(&size).map_err(Error::Invalid)?, stock))
            })
            .collect::<Result<Vec<(SaleId, i64)>, Error>>()?;
        let per_buyer = checked_per_buyer(per_buyer)?;
        checked_times(starts_at, ends_at)?;
        let window = checked_window(payment_window.as_deref())?.or(self.settings.default_payment_window);
        let payment_window_ms = window.map(|w| w.as_millis() as i64);
        let challenge_cost = Some(self.checked_challenge(challenge)?).filter(|&c| c > 0);
        let line = self.checked_queue("waiting_room", waiting_room, starts_at)?;
        let stock = sizes.iter().map(|(_, stock)| stock).sum();
        let draw = self.checked_draw(drop, draw, (line.is_some(), payment_window_ms, stock)).await?;
        if let Some((row, _)) = &draw {
            self.refuse_new_draw_terms(drop, &sizes, per_buyer, row.waitlist_places).await?;
        }
        let mut spec = DropSpec {
            sizes,
            starts_at_ms: starts_at.map(to_ms),
            ends_at_ms: ends_at.map(to_ms),
            payment_window_ms,
            per_buyer,
            challenge_cost,
            line,
            draw: draw.as_ref().map(|(_, draw)| draw.clone()),
        };
        for (sale, _) in &spec.sizes {
            if db::sale_retired(&self.pool, sale.as_str()).await? == Some(true) {
                return Err(Error::SeedRetired);
            }
            match self.refuse_if_redis_forgot_orders(sale).await {
                // Redis still knows the size's buyers: the drop's script refuses it (a size left
                // out, else `drop_in_progress`), whether or not the worker stored them yet.
                Err(Error::SaleInProgress) => {}
                other => other?,
            }
        }
        let mut tx = self.pool.begin().await?;
        // The drop's row first, then its sizes' in id order (`spec.sizes` is sorted by size).
        store::lock(&mut tx, drop).await?;
        for (sale, stock) in &spec.sizes {
            if db::lock_retired(&mut tx, sale.as_str()).await? {
                return Err(Error::SeedRetired);
            }
            let row = db::SaleRow {
                stock_initial: *stock,
                starts_at,
                ends_at,
                payment_window_ms,
                queue: None,
                per_buyer,
                challenge_cost: if line.is_some() { None } else { challenge_cost },
            };
            db::upsert_sale(&mut tx, sale, &row).await?;
        }
        let row = store::DropRow { per_buyer, starts_at, ends_at, payment_window_ms, line, challenge_cost };
        let kept = store::upsert(&mut tx, drop, &row).await?;
        if let (Some(line), Some(seed)) = (spec.line.as_mut(), kept) {
            line.seed = seed; // the seed Postgres keeps: Redis takes it unless it keeps one already
        }
        if let (Some((row, _)), Some(spec_draw)) = (&draw, spec.draw.as_mut()) {
            spec_draw.commitment = draw_store::upsert(&mut tx, drop, row).await?;
        }
        match drops::seed(&self.sales, drop, &spec).await? {
            // The row takes the line's seed Redis keeps (shuffled with it, its SHA-256 published)
            // when it kept another: one left by a seed whose transaction failed after its call.
            DropSeed::Seeded => {
                if let Some(line) = &spec.line {
                    let keys = LineKeys::of_drop(self.sales.keyspace().prefix(), drop.as_str());
                    match admission::kept_seed(self.sales.keyspace(), &keys).await? {
                        Some(kept) if kept != line.seed => store::set_line_seed(&mut tx, drop, &kept).await?,
                        _ => {}
                    }
                }
            }
            DropSeed::NotADrop => return Err(Error::NotADrop),
            DropSeed::SizeMissing(size) => return Err(Error::DropSizeMissing(size)),
            DropSeed::InProgress(size) => return Err(Error::DropInProgress(size)),
        }
        let effect = json!({
            "sizes": spec.sizes.iter().map(|(sale, stock)| (sale.to_string(), *stock)).collect::<BTreeMap<_, _>>(),
            "per_buyer": per_buyer,
            "starts_at": audit::instant(starts_at),
            "ends_at": audit::instant(ends_at),
            "payment_window_ms": payment_window_ms,
            "waiting_room_rate": line.map(|l| l.rate),
            "challenge_cost": challenge_cost,
            "draw": spec.draw.as_ref().map(|d| json!({"opens_at_ms": d.opens_at_ms, "closes_at_ms": d.closes_at_ms,
                "commitment": d.commitment, "waitlist": d.waitlist})),
        });
        audit::record_drop(&mut tx, drop, "drop_seed", None, &effect, actor).await?;
        tx.commit().await?;
        for (sale, _) in &spec.sizes {
            self.sold_out.clear(sale.as_str());
            self.board.forget(sale).await;
        }
        tracing::info!(drop_id = %drop, sizes = spec.sizes.len(), per_buyer, "drop seeded");
        self.drop_report(drop).await
    }

    /// The drop whole, read afresh: each size's state and counts. A drop Redis does not know is
    /// `unknown_drop`, for one Redis read and no Postgres statement.
    pub async fn drop_report(&self, drop: &DropId) -> Result<DropReport, Error> {
        let sizes = drops::sizes(&self.sales, drop).await?;
        if sizes.is_empty() {
            return Err(Error::UnknownDrop);
        }
        let states = futures::future::try_join_all(sizes.iter().map(|sale| self.sales.sale_state(sale))).await?;
        let (secs, micros) = self.sales.keyspace().server_time().await?;
        let persisted = db::count_orders_by_sale(&self.pool, &sizes).await.ok();
        let tallies = reservations_store::tally_by_sale(&self.pool, &sizes).await.ok();
        let sizes = sizes
            .into_iter()
            .zip(states)
            .filter_map(|(sale, redis)| {
                let persisted = persisted.as_ref().map(|p| p.get(sale.as_str()).copied().unwrap_or(0));
                let tally = tallies.as_ref().map(|t| t.get(sale.as_str()).copied().unwrap_or_default());
                let size = drop.size_of(&sale)?.to_owned();
                Some((size, SaleReport { redis: redis?, sale, persisted, tally }))
            })
            .collect();
        let draw = draw_entries::info(self.sales.keyspace(), drop).await?;
        Ok(DropReport { drop: drop.clone(), sizes, server_time_ms: secs * 1000 + micros / 1000, draw })
    }

    /// The drop whole, from this instance's snapshots of its sizes and its read of the drop's line
    /// (no Redis read for a made-up drop: the registry of sales says it has no size, and the
    /// request counts against the client's quota of requests naming unknown sales).
    pub async fn drop_view(&self, drop: &DropId, client: IpAddr) -> Result<DropView, Error> {
        let sales = self.board.group_sales(drop.as_str()).await?;
        if sales.is_empty() {
            Meter::new(&self.limits, &self.metrics).check_unknown_sale(client)?;
            return Err(Error::UnknownDrop);
        }
        let snapshots = futures::future::try_join_all(sales.iter().map(|sale| self.board.snapshot(sale))).await?;
        let sizes = sales
            .iter()
            .zip(snapshots)
            .filter_map(|(sale, snapshot)| Some((drop.size_of(sale)?.to_owned(), snapshot?)))
            .collect::<Vec<_>>();
        if sizes.is_empty() {
            return Err(Error::UnknownDrop);
        }
        let mut draw = match sizes.iter().any(|(_, snapshot)| snapshot.state.draw) {
            true => draw_entries::info(self.sales.keyspace(), drop).await?,
            false => None,
        };
        if let Some(draw) = draw.as_mut().filter(|draw| draw.state == "drawn") {
            draw.seed = crate::draw::run::store::draw(&self.pool, drop).await?.map(|row| row.seed);
        }
        let has_line = sizes.iter().any(|(_, snapshot)| snapshot.state.drop_line);
        let line = if has_line { self.admission.line_if_readable(&LineId::Drop(drop.clone())).await } else { None };
        Ok(DropView { drop: drop.clone(), sizes, draw, line })
    }

    /// Turns the drop's one switch: every size and the line in one Redis call (from its answer on
    /// no purchase of any size is made after a pause or an end, on any instance), one audit entry,
    /// an end recorded in every size's row and the drop's. Answers the drop after it.
    pub async fn switch_drop(
        &self,
        drop: &DropId,
        switch: Switch,
        reason: Option<&str>,
        actor: Option<&str>,
    ) -> Result<DropReport, Error> {
        let reason = checked_reason(reason)?;
        let mut tx = self.pool.begin().await?;
        // Held through the Redis call: a seed of the drop running meanwhile waits, or is waited for.
        store::lock(&mut tx, drop).await?;
        let redis_reason = if switch == Switch::Pause { reason.unwrap_or_default() } else { "" };
        let switched = match drops::switch(&self.sales, drop, switch, redis_reason).await? {
            Ok(switched) => switched,
            Err(NotSwitched::UnknownDrop) => return Err(Error::UnknownDrop),
            Err(NotSwitched::NotADrop) => return Err(Error::TooManySizes),
            Err(NotSwitched::SizeMissing(size)) => {
                return Err(Error::Internal(anyhow::anyhow!("size {size} of drop {drop} has no meta in Redis")));
            }
        };
        let at = ms_to_time(switched.at_ms);
        let ids: Vec<&str> = switched.sizes.iter().map(SaleId::as_str).collect();
        if switch == Switch::End {
            store::end(&mut tx, drop, &ids, at).await?;
        }
        let effect = json!({
            "sizes": ids,
            "paused_before": switched.paused_before,
            "paused": switch == Switch::Pause || (switched.paused_before > 0 && switch == Switch::End),
            "at": audit::instant(Some(at)),
        });
        let action = format!("drop_{}", switch.action());
        audit::record_drop(&mut tx, drop, &action, reason, &effect, actor).await?;
        tx.commit().await?;
        for sale in &switched.sizes {
            self.board.invalidate(sale).await;
        }
        tracing::info!(drop_id = %drop, action, reason, sizes = ids.len(), "drop switched");
        self.drop_report(drop).await
    }

    /// `draw_stock_fixed` for a drop in draw mode: its sizes' stock is the draw's terms
    /// ([`Error::DrawStockFixed`]).
    pub(super) async fn refuse_draw_restock(&self, drop: &DropId) -> Result<(), Error> {
        match crate::draw::run::store::is_draw(&self.pool, drop).await? {
            true => Err(Error::DrawStockFixed),
            false => Ok(()),
        }
    }

    /// Changes several sizes' stock at once (`add`: size name -> units added, or taken back when
    /// negative), all or nothing: if one size would go below 0 left or beyond the largest stock,
    /// no size changes (409 naming it). One Redis call, one audit entry; every size's row follows.
    pub async fn restock_drop(
        &self,
        drop: &DropId,
        add: BTreeMap<String, i64>,
        reason: Option<&str>,
        actor: Option<&str>,
    ) -> Result<DropReport, Error> {
        let reason = checked_reason(reason)?;
        if add.is_empty() || add.len() > MAX_SIZES {
            return Err(Error::Invalid(format!("add must name 1 to {MAX_SIZES} sizes")));
        }
        // Every entry is checked, a 0 too (it changes nothing, but a malformed one is still 400).
        let adds = add
            .iter()
            .map(|(size, units)| {
                if !(-MAX_STOCK..=MAX_STOCK).contains(units) {
                    return Err(Error::Invalid(format!("add.{size} must be between -{MAX_STOCK} and {MAX_STOCK}")));
                }
                Ok((drop.size(size).map_err(Error::Invalid)?, *units))
            })
            .filter(|entry| !matches!(entry, Ok((_, 0))))
            .collect::<Result<Vec<_>, Error>>()?;
        if adds.is_empty() {
            return self.drop_report(drop).await; // nothing to change, nothing to record
        }
        self.refuse_draw_restock(drop).await?;
        let mut tx = self.pool.begin().await?;
        let ids: Vec<&str> = adds.iter().map(|(sale, _)| sale.as_str()).collect();
        // The rows' locks order stock changes: the last one to commit writes the latest figures.
        // Under them, a size a retirement has marked refuses the change (its keys are about to go,
        // and its row is the retired sale's record).
        let retired: Option<String> = sqlx::query_scalar(
            "select sale_id from (select sale_id, retired_at from sales where sale_id = any($1)
             order by sale_id collate \"C\" for update) locked where retired_at is not null limit 1",
        )
        .bind(&ids)
        .fetch_optional(&mut *tx)
        .await?;
        if let Some(size) = retired {
            return Err(Error::DropStock { size, refusal: Box::new(Error::SaleRetired) });
        }
        let figures = match drops::restock(&self.sales, drop, &adds, MAX_STOCK).await? {
            DropRestock::Done(figures) => figures,
            DropRestock::UnknownSize(size) => {
                let known = drops::sizes(&self.sales, drop).await?;
                return Err(if known.is_empty() {
                    Error::UnknownDrop
                } else {
                    Error::Invalid(format!("{size} is not a size of the drop"))
                });
            }
            DropRestock::BelowZero { size, stock_left } => {
                return Err(Error::DropStock { size, refusal: Box::new(Error::StockBelowZero { stock_left }) });
            }
            DropRestock::TooMuch { size, stock_initial } => {
                return Err(Error::DropStock { size, refusal: Box::new(Error::StockTooLarge { stock_initial }) });
            }
            DropRestock::Restoring(size) => {
                return Err(Error::DropStock { size, refusal: Box::new(Error::SaleRestoring) });
            }
        };
        for (sale, _) in &adds {
            self.sold_out.clear(sale.as_str());
            self.board.invalidate(sale).await;
        }
        let recorded = async {
            for (sale, stock_initial, _) in &figures {
                sqlx::query("update sales set stock_initial = $2, updated_at = now() where sale_id = $1")
                    .bind(sale.as_str())
                    .bind(stock_initial)
                    .execute(&mut *tx)
                    .await?;
            }
            let by_size = |figure: fn(&(SaleId, i64, i64)) -> i64| -> BTreeMap<String, i64> {
                figures.iter().map(|f| (f.0.to_string(), figure(f))).collect()
            };
            let effect = json!({
                "add": adds.iter().map(|(sale, units)| (sale.to_string(), *units)).collect::<BTreeMap<_, _>>(),
                "stock_initial": by_size(|f| f.1),
                "stock_left": by_size(|f| f.2),
            });
            audit::record_drop(&mut tx, drop, "drop_stock", reason, &effect, actor).await?;
            tx.commit().await
        };
        if let Err(err) = recorded.await {
            tracing::error!(drop_id = %drop, error = %err, "drop stock changed in Redis but not recorded in Postgres");
            return Err(Error::NotRecorded(anyhow::Error::new(err).context("postgres")));
        }
        tracing::info!(drop_id = %drop, sizes = adds.len(), "drop stock changed");
        self.drop_report(drop).await
    }

    /// The drop's own actions (its seeds, switches and stock changes), newest first, at most
    /// `limit`. A drop Redis does not know and Postgres has no row of is `unknown_drop`.
    pub async fn drop_audit(&self, drop: &DropId, limit: Option<i64>) -> Result<Vec<Entry>, Error> {
        if drops::sizes(&self.sales, drop).await?.is_empty() && !store::exists(&self.pool, drop).await? {
            return Err(Error::UnknownDrop);
        }
        Ok(audit::list_drop(&self.pool, drop, limit.unwrap_or(audit::MAX_LISTED)).await?)
    }
}
