//! Which line a buyer stands in: a queued sale's own, or a drop's, one line for every size of the
//! drop (the sales `<drop>.<size>` of the group `<drop>`, whose sizes' metas say `line` = `drop`).

use std::borrow::Cow;

use crate::domain::{DropId, SaleId};
use crate::redis::keys::{LineKeys, SaleKeys};

/// A line: a queued sale's, or a drop's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LineId {
    /// A queued sale's own line (its keys in the sale's slot).
    Sale(SaleId),
    /// A drop's line: its keys in the drop's group's slot.
    Drop(DropId),
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
    /// The sale's or the drop's id.
    pub fn as_str(&self) -> &str {
        match self {
            Self::Sale(sale) => sale.as_str(),
            Self::Drop(drop) => drop.as_str(),
        }
    }

    /// What the per-sale rate limits key the line by: the sale, or the drop's name.
    pub fn limited_as(&self) -> Cow<'_, SaleId> {
        match self {
            Self::Sale(sale) => Cow::Borrowed(sale),
            Self::Drop(drop) => Cow::Owned(drop.as_sale_name()),
        }
    }

    /// What its signed strings are bound to.
    pub fn subject(&self) -> Subject<'_> {
        Subject { drop: matches!(self, Self::Drop(_)), id: self.as_str() }
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
