//! Which line a buyer stands in: a queued sale's own, or a drop's, one line for every size of the
//! drop (the sales `<drop>.<size>` of the group `<drop>`, whose sizes' metas say `line` = `drop`).

use crate::domain::SaleId;
use crate::redis::keys::{LineKeys, SaleKeys};

/// A line: a queued sale's, or a drop's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineId {
    /// A queued sale's own line (its keys in the sale's slot).
    Sale(SaleId),
    /// A drop's line: the id is the drop's (a group name, no `.`), its keys in the group's slot.
    Drop(SaleId),
}

/// What a line's signed strings are bound to: its kind and its id (`Copy`, borrowed).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Subject<'a> {
    /// A drop's line (its own labels in the MAC: never passes for a sale's).
    pub drop: bool,
    /// The sale's or the drop's id.
    pub id: &'a str,
}

impl<'a> From<&'a SaleId> for Subject<'a> {
    /// A queued sale's own line.
    fn from(sale: &'a SaleId) -> Self {
        Self { drop: false, id: sale.as_str() }
    }
}

impl LineId {
    /// The line of drop `drop`: `None` for an id with a `.` (a sale of a group, not a drop).
    pub fn drop(drop: SaleId) -> Option<Self> {
        drop.group().is_none().then_some(Self::Drop(drop))
    }

    /// The sale's or the drop's id.
    pub fn id(&self) -> &SaleId {
        match self {
            Self::Sale(id) | Self::Drop(id) => id,
        }
    }

    /// What its signed strings are bound to.
    pub fn subject(&self) -> Subject<'_> {
        Subject { drop: matches!(self, Self::Drop(_)), id: self.id().as_str() }
    }

    /// A name no other line has: the sale id, or `drop:<drop>` (a sale id has no `:`). The
    /// instance's caches and a challenge's `sale` field use it.
    pub fn tag(&self) -> String {
        match self {
            Self::Sale(sale) => sale.as_str().to_owned(),
            Self::Drop(drop) => format!("drop:{drop}"),
        }
    }

    /// The line's keys under `prefix`.
    pub fn keys(&self, prefix: &str) -> LineKeys {
        match self {
            Self::Sale(sale) => SaleKeys::new(prefix, sale).line(),
            Self::Drop(drop) => LineKeys::of_drop(prefix, drop.as_str()),
        }
    }
}

impl std::fmt::Display for LineId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.tag())
    }
}
