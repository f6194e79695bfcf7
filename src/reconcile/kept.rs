//! The shards Redis kept of a sharded sale whose shard 0 it lost (a failover to an empty replica
//! of shard 0's master, say). Shard 0's meta is what records the layout, so the sale is lost; its
//! other shards may still hold buyers and orders not yet in Postgres, and with a layout kept by
//! an instance (`crate::purchase::LAYOUT_TTL`) they may even sell.
//!
//! The repair seeds the lost sale again as an unsharded sale from its `sales` row, and restores
//! its buyers from Postgres. Before it, [`settle`] ends every such shard (nothing sells there from
//! then on) and refuses while any of their orders is still on its way to Postgres: a buyer whose
//! order is still queued there would be restored by no one, and could buy again. Once the workers
//! have copied them, every buyer of those shards is a Postgres order, restored with the rest. The
//! ended shards stay registered (the workers read their empty streams) until the sale's
//! retirement removes them (`crate::retire`).

use redis::AsyncCommands;

use super::ReconcileError;
use crate::controls;
use crate::domain::SaleId;
use crate::purchase::Sales;
use crate::redis::order_stream;

/// Ends the shards the registry lists for `sale` outside its layout (all it lists: Redis lost the
/// sale), then counts their orders not yet committed: [`ReconcileError::OrdersQueued`] if any. An
/// unsharded sale has none and passes at once.
pub(super) async fn settle(sales: &Sales, sale: &SaleId) -> Result<(), ReconcileError> {
    let kept = sales.shards_outside_layout(sale).await?;
    if kept.is_empty() {
        return Ok(());
    }
    controls::end_shards(sales, &kept).await?;
    let mut con = sales.keyspace().conn();
    let mut queued = 0;
    for keys in &kept {
        let entries: u64 = con.xlen(&keys.orders).await?;
        queued += entries.max(order_stream::pending(&mut con, &keys.orders).await?);
    }
    if queued > 0 {
        tracing::warn!(sale_id = %sale, shards = kept.len(), queued, "the shards Redis kept of a lost sale are ended; \
            their orders are still queued: repair again once the workers have copied them");
        return Err(ReconcileError::OrdersQueued { queued });
    }
    Ok(())
}
