//! A retiring sale's places in the registries: the shards it has (its layout's, and any a repair
//! left of an earlier one), and their removal.

use redis::AsyncCommands;

use super::{RetireError, Retirer};
use crate::domain::SaleId;
use crate::purchase::events::RETIRED_EVENT;
use crate::purchase::registry;
use crate::redis::keys::{SaleKeys, sales_registry_key, shards_registry_key};

impl Retirer {
    /// The keys of every shard to take down: the layout's, shard 0 first, then those the shards
    /// registry lists beyond it (a repair ended and left them: `crate::reconcile`).
    pub(super) async fn shards(&self, sale: &SaleId) -> Result<Vec<SaleKeys>, RetireError> {
        let mut shards = self.sales.all_shard_keys(sale).await?;
        shards.extend(self.sales.shards_outside_layout(sale).await?);
        Ok(shards)
    }

    /// Takes the shards a repair left of an earlier layout (`crate::reconcile`) out of the shards
    /// registry, once their keys are gone: the layout's went first ([`Self::unregister`]).
    pub(super) async fn unregister_kept(&self, sale: &SaleId) -> Result<(), RetireError> {
        let keyspace = self.sales.keyspace();
        let kept = registry::registered_shards(keyspace, sale).await?;
        if !kept.is_empty() {
            let members: Vec<String> = kept.iter().map(|suffix| format!("{sale}:{suffix}")).collect();
            let _: i64 = keyspace.conn().srem(shards_registry_key(keyspace.prefix()), members).await?;
        }
        Ok(())
    }

    /// Removes the sale and its layout's shards from the registries (those a repair left go last:
    /// [`Self::unregister_kept`]), then announces the retirement.
    pub(super) async fn unregister(&self, sale: &SaleId, shards: &[SaleKeys]) -> Result<(), RetireError> {
        let keyspace = self.sales.keyspace();
        let mut con = keyspace.conn();
        let _: i64 = con.srem(sales_registry_key(keyspace.prefix()), sale.as_str()).await?;
        let layout = self.sales.read_layout(sale).await?.unwrap_or_default();
        if layout.is_sharded() {
            let members: Vec<String> = layout.suffixes().iter().map(|suffix| format!("{sale}:{suffix}")).collect();
            let _: i64 = con.srem(shards_registry_key(keyspace.prefix()), members).await?;
        }
        debug_assert!(shards.len() >= layout.shards() as usize);
        let event = format!("{RETIRED_EVENT}{sale}");
        if let Err(err) = con.publish::<_, _, i64>(keyspace.events_channel(), event).await {
            // The instances' caches then lapse by themselves (crate::purchase::retired).
            tracing::warn!(sale_id = %sale, error = %err, "retirement event not published");
        }
        Ok(())
    }
}
