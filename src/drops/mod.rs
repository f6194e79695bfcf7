//! Drops, their Redis side: a drop is a product whose sizes (or variants) are the sales of one
//! group, `<drop>.<size>` (`crate::domain::DropId`), in the group's hash slot. Seeding or updating
//! the whole drop (`seed`: `lua/drop_seed.lua`, one call over every size, the group's keys and the
//! drop's line), its one switch and its stock (`control`: `lua/drop_control.lua`,
//! `lua/drop_restock.lua`, one call each), its sizes (`sizes`), and its row in Postgres (`store`).
//! Which of them a use case runs, and in what order with Postgres, is `crate::shop`'s.

mod control;
mod seed;
pub mod store;

use redis::{AsyncCommands, RedisResult};

use crate::domain::{DropId, SaleId};
use crate::purchase::Sales;
use crate::redis::keys::DropKeys;

pub use control::{DropRestock, DropSwitched, NotSwitched, restock, switch};
pub use seed::{DropDraw, DropSeed, DropSpec, restore, seed};

/// Most sizes one drop may have.
pub const MAX_SIZES: usize = 64;

/// The drop's keys under the deployment's prefix.
pub fn keys(sales: &Sales, drop: &DropId) -> DropKeys {
    DropKeys::new(sales.keyspace().prefix(), drop)
}

/// The drop's sizes as Redis's group set holds them, by id (empty: no such drop, or a group with
/// no sale left). A drop has at most [`MAX_SIZES`]; a group seeded sale by sale may have more, of
/// which the first [`MAX_SIZES`] by id are read.
pub async fn sizes(sales: &Sales, drop: &DropId) -> RedisResult<Vec<SaleId>> {
    Ok(members(sales, drop).await?.sizes)
}

/// The group's sales as Redis holds them: the drop's sizes (at most [`MAX_SIZES`], by id), and
/// whether that is all of them.
pub struct Members {
    /// The sizes, by id.
    pub sizes: Vec<SaleId>,
    /// Whether the group holds only sizes of the drop, and at most [`MAX_SIZES`]: a group seeded
    /// sale by sale may hold more.
    pub only_sizes: bool,
}

/// The group's sales ([`Members`]).
pub async fn members(sales: &Sales, drop: &DropId) -> RedisResult<Members> {
    let ids: Vec<String> = sales.keyspace().conn().smembers(keys(sales, drop).sales).await?;
    let mut sizes: Vec<SaleId> =
        ids.iter().filter_map(|id| SaleId::parse(id).ok()).filter(|id| drop.size_of(id).is_some()).collect();
    let only_sizes = sizes.len() == ids.len() && sizes.len() <= MAX_SIZES;
    sizes.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
    sizes.truncate(MAX_SIZES);
    Ok(Members { sizes, only_sizes })
}
