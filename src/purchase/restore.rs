//! Restoring buyers that Postgres holds and Redis lost (`lua/restore.lua`), for reconciliation's
//! repair after a Redis loss.

use redis::{RedisResult, ScriptInvocation};

use super::Sales;
use super::shards::{home_shard, visit_order};
use crate::domain::{SaleId, UserId};
use crate::redis::keys::SaleKeys;
use crate::redis::lua;

/// Users restored per script call.
const PAGE: usize = 500;

/// A committed order of a buyer Redis forgot, as Postgres holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOrder {
    pub user_id: UserId,
    pub order_id: uuid::Uuid,
    /// The Redis time of the purchase, Unix milliseconds.
    pub created_at_ms: i64,
    /// The order was cancelled or expired: its units are in the stock, not the buyer's.
    pub released: bool,
    /// Units bought.
    pub quantity: u32,
}

/// What a restore did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Restored {
    /// Users put back into a buyer set.
    pub buyers: u64,
    /// Items of stock the restored buyers would have taken below 0 (stock set to 0 instead).
    pub overdrawn: u64,
    /// Released orders of restored buyers put back into the released set (their units were in
    /// the stock already).
    pub released: u64,
}

impl Sales {
    /// Raises each buyer's units held in the group of `sale` to at least `units` (`lua/held_floor.lua`,
    /// one call per page), never lowering one; answers how many it raised. Nothing for a sale
    /// without a group.
    pub async fn hold_at_least(&self, sale: &SaleId, units: &[(UserId, u32)]) -> RedisResult<u64> {
        if sale.group().is_none() {
            return Ok(0);
        }
        let keys = self.keyspace().sale_keys(sale);
        let mut raised = 0;
        for page in units.chunks(PAGE) {
            let mut call = lua::HELD_FLOOR.key(&keys.held);
            for (user, units) in page {
                call.arg(user.as_str()).arg(units);
            }
            raised += lua::run::<u64>(&call, &mut self.keyspace().conn()).await?;
        }
        Ok(raised)
    }

    /// Puts each user back into the buyer set of its home shard (where `buy.lua` looks first),
    /// with a receipt naming its committed order, and lowers that shard's stock by the live
    /// orders' units (a released order's id joins the released set instead). A grouped sale's
    /// units held per buyer are the caller's: [`Sales::hold_at_least`], once, over the group.
    /// Users already in the set are left alone, so a repeated restore does nothing. A sharded
    /// sale's buyers go where their purchases went: [`Sales::restore_where_bought`].
    pub async fn restore_buyers(&self, sale: &SaleId, orders: &[CommittedOrder]) -> RedisResult<Restored> {
        let shards = self.all_shard_keys(sale).await?;
        if shards.len() > 1 {
            return self.restore_where_bought(&shards, orders).await;
        }
        let mut done = Restored::default();
        for page in orders.chunks(PAGE) {
            let (buyers, overdrawn, released): (u64, u64, u64) =
                lua::run(&restore_call(&shards[0], page, false), &mut self.keyspace().conn()).await?;
            done.add(buyers, overdrawn, released);
        }
        Ok(done)
    }

    /// A sharded sale's buyers, each into the first shard of its visiting order whose stock covers
    /// it, as its purchase found them: a buyer whose home shard had sold out fell over to a later
    /// one, whose stock still has the unit its lost purchase took. Its repeat then meets it there,
    /// after shards sold out before (which never get stock back). Restored into its home shard, it
    /// left that unit to be sold again, over the orders Postgres holds. Without such a shard, its
    /// home shard takes it (overdrawn, as for an unsharded sale). A sharded sale's orders are of
    /// one unit, never released (no payment window).
    async fn restore_where_bought(&self, shards: &[SaleKeys], orders: &[CommittedOrder]) -> RedisResult<Restored> {
        let mut done = Restored::default();
        for order in orders {
            let mut placed = false;
            for shard in visit_order(&order.user_id, shards.len() as u32) {
                let call = restore_call(&shards[shard], [order], true);
                let (buyers, overdrawn, released, skipped): (u64, u64, u64, u64) =
                    lua::run(&call, &mut self.keyspace().conn()).await?;
                if skipped == 0 {
                    done.add(buyers, overdrawn, released);
                    placed = true;
                    break;
                }
            }
            if !placed {
                let home = &shards[home_shard(&order.user_id, shards.len() as u32)];
                let (buyers, overdrawn, released): (u64, u64, u64) =
                    lua::run(&restore_call(home, [order], false), &mut self.keyspace().conn()).await?;
                done.add(buyers, overdrawn, released);
            }
        }
        Ok(done)
    }
}

impl Restored {
    fn add(&mut self, buyers: u64, overdrawn: u64, released: u64) {
        self.buyers += buyers;
        self.overdrawn += overdrawn;
        self.released += released;
    }
}

/// `lua/restore.lua` on one shard for `orders`; `fit`: only where its stock covers them.
fn restore_call<'a>(
    keys: &SaleKeys,
    orders: impl IntoIterator<Item = &'a CommittedOrder>,
    fit: bool,
) -> ScriptInvocation<'static> {
    let mut call = lua::RESTORE.key(&keys.stock);
    call.key(&keys.buyers).key(&keys.receipts).key(&keys.released).key(&keys.meta);
    if fit {
        call.arg("fit");
    }
    for order in orders {
        call.arg(order.user_id.as_str())
            .arg(order.order_id.to_string())
            .arg(order.created_at_ms)
            .arg(if order.released { "1" } else { "0" })
            .arg(order.quantity);
    }
    call
}
