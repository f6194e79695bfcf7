//! The purchase: `lua/buy.lua` on one shard or, for a sharded sale ([`super::shards`]), on each
//! shard in the user's visit order until one decides.

use redis::RedisResult;
use uuid::Uuid;

use super::Sales;
use crate::domain::{SaleId, UserId};
use crate::purchase::shards::Layout;
use crate::redis::lua::{self, unexpected_reply};

/// What the purchase decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BuyOutcome {
    /// Bought: stock decremented, the order in the shard's stream.
    Purchased,
    /// The sale was never seeded.
    UnknownSale,
    /// Before the sale's start (Redis time).
    NotStarted,
    /// At or after the sale's end (Redis time).
    Ended,
    /// The user is already a buyer.
    AlreadyPurchased,
    /// Every shard answered sold out.
    SoldOut,
}

/// One shard's answer to `lua/buy.lua`.
enum ShardReply {
    Decided(BuyOutcome),
    /// The shard records another shard count than the caller assumed.
    WrongShards,
}

impl Sales {
    /// Buys through `lua/buy.lua`: one atomic decision per shard, and on success the order is in
    /// that shard's stream. An unsharded sale costs one call. A sharded sale is tried shard by
    /// shard in the user's visit order, moving on only after `sold_out`.
    ///
    /// The layout is not read first: a sale this instance has not seen is assumed unsharded, and the
    /// script answers `wrong_shards` (writing nothing) if it is not; then the layout is read and
    /// the purchase asked again.
    pub async fn buy(&self, sale: &SaleId, user: &UserId, order_id: Uuid) -> RedisResult<BuyOutcome> {
        let cached = self.cached_layout(sale);
        let assumed = cached.clone().unwrap_or_default();
        match self.buy_on(&assumed, sale, user, order_id).await? {
            // A kept layout leading nowhere: the sale's keys were lost and it was seeded anew.
            ShardReply::Decided(BuyOutcome::UnknownSale) if cached.is_some() => {}
            ShardReply::Decided(outcome) => return Ok(outcome),
            ShardReply::WrongShards => {}
        }
        let Some(layout) = self.read_layout(sale).await? else {
            return Ok(BuyOutcome::UnknownSale);
        };
        match self.buy_on(&layout, sale, user, order_id).await? {
            ShardReply::Decided(outcome) => Ok(outcome),
            ShardReply::WrongShards => Err(unexpected_reply("buy.lua", "wrong_shards after reading the layout")),
        }
    }

    async fn buy_on(&self, layout: &Layout, sale: &SaleId, user: &UserId, order_id: Uuid) -> RedisResult<ShardReply> {
        let keys = layout.keys(self.redis.prefix(), sale);
        let order_id = order_id.to_string();
        for shard in layout.visit_order(user) {
            let mut call = lua::BUY.key(&keys[shard].all()[..]);
            call.arg(sale.as_str()).arg(user.as_str()).arg(&order_id).arg(layout.shards());
            let status: String = lua::run(&call, &mut self.redis.conn()).await?;
            let outcome = match status.as_str() {
                "sold_out" => continue,
                "wrong_shards" => return Ok(ShardReply::WrongShards),
                "ok" => BuyOutcome::Purchased,
                "unknown_sale" => BuyOutcome::UnknownSale,
                "not_started" => BuyOutcome::NotStarted,
                "ended" => BuyOutcome::Ended,
                "already_purchased" => BuyOutcome::AlreadyPurchased,
                other => return Err(unexpected_reply("buy.lua", other)),
            };
            return Ok(ShardReply::Decided(outcome));
        }
        Ok(ShardReply::Decided(BuyOutcome::SoldOut))
    }
}
