//! The purchase: `lua/buy.lua` on one shard or, for a sharded sale ([`super::shards`]), on each
//! shard in the user's visit order until one decides.

use redis::aio::ConnectionLike;
use redis::{RedisResult, Value};
use uuid::Uuid;

use super::Sales;
use super::receipt::{OrderStatus, Receipt};
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
    /// The user is already a buyer: the order it was given (none for a buyer without a receipt).
    AlreadyPurchased(Option<Receipt>),
    /// Every shard answered sold out.
    SoldOut,
    /// Bought, but fewer than `SECKILL_CONFIRM_REPLICAS` replicas acknowledged it in time (how
    /// many did; 0 as well when the `WAIT` itself failed). The purchase stands.
    NotDurable {
        /// Replicas that acknowledged it.
        replicas: u32,
    },
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
    ///
    /// With `SECKILL_CONFIRM_REPLICAS`, the purchase runs on a dedicated connection and, once
    /// bought, `WAIT`s there for the replicas ([`crate::redis::confirm`]).
    pub async fn buy(&self, sale: &SaleId, user: &UserId, order_id: Uuid) -> RedisResult<BuyOutcome> {
        let Some(pool) = &self.confirm else {
            return self.buy_with(&mut self.redis.conn(), sale, user, order_id).await;
        };
        let mut conn = pool.get().await?;
        let outcome = self.buy_with(&mut conn, sale, user, order_id).await?;
        if outcome != BuyOutcome::Purchased {
            return Ok(outcome);
        }
        match conn.wait_for_replicas().await {
            Ok(replicas) if replicas >= pool.replicas => Ok(BuyOutcome::Purchased),
            Ok(replicas) => Ok(BuyOutcome::NotDurable { replicas }),
            Err(error) => {
                tracing::warn!(%error, %order_id, "WAIT for replicas failed after a purchase");
                Ok(BuyOutcome::NotDurable { replicas: 0 })
            }
        }
    }

    async fn buy_with(
        &self,
        con: &mut impl ConnectionLike,
        sale: &SaleId,
        user: &UserId,
        order_id: Uuid,
    ) -> RedisResult<BuyOutcome> {
        let cached = self.cached_layout(sale);
        let assumed = cached.clone().unwrap_or_default();
        match self.buy_on(con, &assumed, sale, user, order_id).await? {
            // A kept layout leading nowhere: the sale's keys were lost and it was seeded anew.
            ShardReply::Decided(BuyOutcome::UnknownSale) if cached.is_some() => {}
            ShardReply::Decided(outcome) => return Ok(outcome),
            ShardReply::WrongShards => {}
        }
        let Some(layout) = self.read_layout(sale).await? else {
            return Ok(BuyOutcome::UnknownSale);
        };
        match self.buy_on(con, &layout, sale, user, order_id).await? {
            ShardReply::Decided(outcome) => Ok(outcome),
            ShardReply::WrongShards => Err(unexpected_reply("buy.lua", "wrong_shards after reading the layout")),
        }
    }

    async fn buy_on(
        &self,
        con: &mut impl ConnectionLike,
        layout: &Layout,
        sale: &SaleId,
        user: &UserId,
        order_id: Uuid,
    ) -> RedisResult<ShardReply> {
        let keys = layout.keys(self.redis.prefix(), sale);
        let order_id = order_id.to_string();
        for shard in layout.visit_order(user) {
            let mut call = lua::BUY.key(&keys[shard].all()[..]);
            call.arg(sale.as_str()).arg(user.as_str()).arg(&order_id).arg(layout.shards());
            let reply: Value = lua::run(&call, con).await?;
            let status = match reply {
                Value::Array(words) => return Ok(ShardReply::Decided(already_purchased(&words)?)),
                other => redis::from_redis_value::<String>(other)?,
            };
            let outcome = match status.as_str() {
                "sold_out" => continue,
                "wrong_shards" => return Ok(ShardReply::WrongShards),
                "ok" => BuyOutcome::Purchased,
                "unknown_sale" => BuyOutcome::UnknownSale,
                "not_started" => BuyOutcome::NotStarted,
                "ended" => BuyOutcome::Ended,
                other => return Err(unexpected_reply("buy.lua", other)),
            };
            return Ok(ShardReply::Decided(outcome));
        }
        Ok(ShardReply::Decided(BuyOutcome::SoldOut))
    }
}

/// The `{"already_purchased", order id, created_at_ms, status}` reply of `lua/buy.lua` (or just
/// `{"already_purchased"}` for a buyer without a receipt).
fn already_purchased(words: &[Value]) -> RedisResult<BuyOutcome> {
    let words: Vec<String> = words.iter().map(redis::from_redis_value_ref).collect::<Result<_, _>>()?;
    let bad = || unexpected_reply("buy.lua", &words.join(" "));
    match words.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["already_purchased"] => Ok(BuyOutcome::AlreadyPurchased(None)),
        ["already_purchased", order_id, created_at_ms, status] => Ok(BuyOutcome::AlreadyPurchased(Some(Receipt {
            order_id: Uuid::parse_str(order_id).map_err(|_| bad())?,
            created_at_ms: created_at_ms.parse().map_err(|_| bad())?,
            status: OrderStatus::parse(status).ok_or_else(bad)?,
        }))),
        _ => Err(bad()),
    }
}
