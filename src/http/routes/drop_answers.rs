//! The drop routes' answers (`super::drops`): a drop whole as the operator reads it
//! (`GET /admin/drops/{drop_id}`, and every change's answer), as the public reads it (`GET
//! /drops/{drop_id}`), and its audit trail, each built from the shop's report.

use serde::{Deserialize, Serialize};
use time::OffsetDateTime;
use utoipa::ToSchema;

use super::admin::SaleStatus;
use super::controls::AuditRecord;
use super::draw_entries::DrawView;
use super::sales::{PublicQueue, SalePhase};
use crate::domain::ms_to_time;
use crate::shop::{DropReport, DropView};

/// A drop whole, as the operator reads it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DropStatus {
    pub drop_id: String,
    /// Each size by name, with where it stands and its sale's state (as `GET /admin/sales/{sale_id}`).
    pub sizes: Vec<DropSize>,
    pub totals: DropTotals,
    /// The Redis server's clock at the read (the sizes' states are at it).
    #[serde(with = "time::serde::rfc3339")]
    pub server_time: OffsetDateTime,
    /// The draw, for a drop in draw mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw: Option<DrawView>,
}

/// One size of a drop, as the operator reads it.
#[derive(Debug, Serialize, ToSchema)]
pub struct DropSize {
    /// The size's name (its sale is `<drop_id>.<size>`).
    pub size: String,
    pub state: SalePhase,
    pub sale: SaleStatus,
}

/// A drop's sizes summed.
#[derive(Debug, Default, Serialize, Deserialize, ToSchema)]
pub struct DropTotals {
    pub stock_initial: i64,
    pub stock_left: i64,
    /// Units bought less units given back (Redis).
    pub units_sold: i64,
    /// Units of the open reservations and of the paid ones (Postgres; `null` while unreachable).
    pub units_reserved: Option<i64>,
    pub units_paid: Option<i64>,
}

/// A drop whole, as the public reads it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicDrop {
    pub drop_id: String,
    /// Each size by name, with where it stands.
    pub sizes: Vec<PublicSize>,
    /// Units one buyer may buy across the sizes.
    pub per_buyer: u32,
    pub stock_initial: i64,
    pub stock_left: i64,
    /// The Redis server's clock now (as this instance estimates it).
    #[serde(with = "time::serde::rfc3339")]
    #[schema(value_type = String, format = DateTime)]
    pub server_time: OffsetDateTime,
    /// The draw, for a drop in draw mode.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub draw: Option<DrawView>,
    /// The drop's one line (waiting room), for a drop with one: its shuffle seed's SHA-256 from
    /// the seed on and the seed from the start on, to check every pre-queue place by
    /// (docs/waiting-room.md, "Audit your place"), as a queued sale's `queue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<PublicQueue>,
}

/// One size of a drop, as the public reads it.
#[derive(Debug, Serialize, ToSchema)]
pub struct PublicSize {
    pub size: String,
    /// The size's sale (`POST /buy`'s `sale_id`).
    pub sale_id: String,
    pub state: SalePhase,
    pub stock_initial: i64,
    pub stock_left: i64,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub starts_at: Option<OffsetDateTime>,
    #[serde(with = "time::serde::rfc3339::option")]
    #[schema(value_type = Option<String>, format = DateTime)]
    pub ends_at: Option<OffsetDateTime>,
}

/// The operators' actions on a drop as a whole, newest first.
#[derive(Debug, Serialize, Deserialize, ToSchema)]
pub struct DropAuditTrail {
    pub drop_id: String,
    pub entries: Vec<AuditRecord>,
}

impl From<DropReport> for DropStatus {
    fn from(DropReport { drop, sizes, server_time_ms, draw }: DropReport) -> Self {
        let mut totals = DropTotals { units_reserved: Some(0), units_paid: Some(0), ..DropTotals::default() };
        let sizes = sizes
            .into_iter()
            .map(|(size, report)| {
                let state = SalePhase::at(&report.redis, server_time_ms);
                let sale = SaleStatus::from(report);
                totals.stock_initial += sale.stock_initial;
                totals.stock_left += sale.stock_left;
                totals.units_sold += sale.units_sold - sale.units_released;
                totals.units_reserved = totals.units_reserved.zip(sale.units_reserved).map(|(a, b)| a + b);
                totals.units_paid = totals.units_paid.zip(sale.units_paid).map(|(a, b)| a + b);
                DropSize { size, state, sale }
            })
            .collect();
        let draw = draw.map(|draw| DrawView::at(draw, server_time_ms));
        Self { drop_id: drop.to_string(), sizes, totals, server_time: ms_to_time(server_time_ms), draw }
    }
}

impl From<DropView> for PublicDrop {
    fn from(DropView { drop, sizes, draw, line }: DropView) -> Self {
        let now = sizes.iter().map(|(_, snapshot)| snapshot.server_time_ms()).max().unwrap_or_default();
        let per_buyer = sizes.first().map_or(1, |(_, snapshot)| snapshot.state.per_buyer);
        let sizes: Vec<PublicSize> = sizes
            .into_iter()
            .map(|(size, snapshot)| {
                let state = &snapshot.state;
                PublicSize {
                    sale_id: format!("{drop}.{size}"),
                    size,
                    state: SalePhase::at(state, now),
                    stock_initial: state.stock_initial,
                    stock_left: state.stock_left.max(0),
                    starts_at: state.starts_at_ms.map(ms_to_time),
                    ends_at: state.ends_at_ms.map(ms_to_time),
                }
            })
            .collect();
        Self {
            drop_id: drop.to_string(),
            per_buyer,
            stock_initial: sizes.iter().map(|s| s.stock_initial).sum(),
            stock_left: sizes.iter().map(|s| s.stock_left).sum(),
            sizes,
            server_time: ms_to_time(now),
            draw: draw.map(|draw| DrawView::at(draw, now)),
            line: line.filter(|line| !line.shuffle_seed().is_empty()).map(|line| {
                let (opens_at_ms, rate) = (line.opens_at_ms.unwrap_or(line.starts_at_ms), line.rate);
                PublicQueue::of(
                    opens_at_ms,
                    u32::try_from(rate).unwrap_or(u32::MAX),
                    line.shuffle_seed(),
                    line.started(),
                )
            }),
        }
    }
}
