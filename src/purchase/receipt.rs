//! A buyer's receipt: the order id a purchase was given, kept by `lua/buy.lua` in the sale's
//! receipts hash beside the buyer set, so a retry after a lost 201 learns its order without
//! asking Postgres. And [`Sales::purchase_of`], what Redis knows of one buyer's purchase.

use std::collections::HashMap;

use futures::future::try_join_all;
use redis::RedisResult;
use uuid::Uuid;

use super::Sales;
use crate::domain::{SaleId, Standing, UserId};
use crate::redis::keys::SaleKeys;
use crate::redis::lua::unexpected_reply;
use crate::redis::order_stream;

/// Where a bought order is: `queued` or `confirmed` as Redis knows it (the purchase scripts'
/// words), or, in a sale with a payment window, the reservation's state as `GET
/// /sales/{id}/order` reads it (`crate::orders::lookup::repeat_status`, for the 409 of a repeat).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum OrderStatus {
    /// Bought; its entry is still in the sale's stream, not yet committed to Postgres.
    Queued,
    /// Committed to Postgres (its entry left the stream, which happens only after the commit).
    Confirmed,
    /// A reservation, to be paid by its deadline.
    Reserved,
    /// A reservation paid in time.
    Paid,
    /// A reservation given back by the buyer.
    Cancelled,
    /// A reservation not paid in time.
    Expired,
    /// A paid order an operator refunded.
    Refunded,
}

impl OrderStatus {
    /// The name the API and the scripts use.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Queued => "queued",
            Self::Confirmed => "confirmed",
            Self::Reserved => "reserved",
            Self::Paid => "paid",
            Self::Cancelled => "cancelled",
            Self::Expired => "expired",
            Self::Refunded => "refunded",
        }
    }

    /// Parses a script's status word (`queued` or `confirmed`: the scripts know no other).
    pub fn parse(word: &str) -> Option<Self> {
        match word {
            "queued" => Some(Self::Queued),
            "confirmed" => Some(Self::Confirmed),
            _ => None,
        }
    }
}

impl From<Standing> for OrderStatus {
    fn from(standing: Standing) -> Self {
        match standing {
            Standing::Confirmed => Self::Confirmed,
            Standing::Reserved => Self::Reserved,
            Standing::Paid => Self::Paid,
            Standing::Cancelled => Self::Cancelled,
            Standing::Expired => Self::Expired,
            Standing::Refunded => Self::Refunded,
        }
    }
}

/// A buyer's order as Redis remembers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    pub order_id: Uuid,
    /// Redis server time of the purchase, Unix milliseconds.
    pub created_at_ms: i64,
    pub status: OrderStatus,
    /// A queued reservation's deadline, Unix milliseconds, from its stream entry
    /// ([`Sales::purchase_of`] only; `None` for any other order, and in the scripts' replies).
    pub pay_by_ms: Option<i64>,
    /// Units bought.
    pub quantity: u32,
}

/// A receipt as the hash holds it: `"<order id> <created_at_ms> <stream entry id>"`, then
/// `" <quantity>"` when more than one unit was bought.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredReceipt {
    pub order_id: Uuid,
    pub created_at_ms: i64,
    /// The stream entry id, `<ms>-<seq>`, as a pair that orders like the stream does.
    pub entry: EntryId,
    /// Units bought (1 when the receipt does not say).
    pub quantity: u32,
}

/// A stream entry id.
pub type EntryId = (u64, u64);

impl StoredReceipt {
    /// Parses a value of the receipts hash.
    pub fn parse(value: &str) -> Result<Self, String> {
        let bad = || format!("a receipt reads {value:?}");
        let mut parts = value.split(' ');
        let (Some(order_id), Some(created_at_ms), Some(entry), quantity, None) =
            (parts.next(), parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(bad());
        };
        Ok(Self {
            order_id: Uuid::parse_str(order_id).map_err(|_| bad())?,
            created_at_ms: created_at_ms.parse().map_err(|_| bad())?,
            entry: parse_entry_id(entry).ok_or_else(bad)?,
            quantity: quantity.map_or(Ok(1), |q| q.parse().map_err(|_| bad()))?,
        })
    }

    /// The receipt of an order written as stream entry `entry` (`<ms>-<seq>`), as the hash
    /// holds it (what [`StoredReceipt::parse`] reads): the quantity only when over 1, as the
    /// scripts write it.
    pub fn value(order_id: Uuid, created_at_ms: i64, entry: &str, quantity: u32) -> String {
        match quantity {
            0 | 1 => format!("{order_id} {created_at_ms} {entry}"),
            units => format!("{order_id} {created_at_ms} {entry} {units}"),
        }
    }

    /// The receipt, with its order's status.
    pub fn with_status(&self, status: OrderStatus) -> Receipt {
        let (order_id, created_at_ms, quantity) = (self.order_id, self.created_at_ms, self.quantity);
        Receipt { order_id, created_at_ms, status, pay_by_ms: None, quantity }
    }
}

/// Parses a stream entry id `<ms>-<seq>`.
pub fn parse_entry_id(id: &str) -> Option<EntryId> {
    let (ms, seq) = id.split_once('-')?;
    Some((ms.parse().ok()?, seq.parse().ok()?))
}

/// What Redis knows of one user's purchase in a sale.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Purchase {
    /// The sale was never seeded (or Redis lost it).
    UnknownSale,
    /// The user is not a buyer.
    NotBought,
    /// The user is a buyer: its receipt (none for a buyer restored by hand) and whether its order
    /// is still in the stream.
    Bought(Option<Receipt>),
}

/// A sold-out sale's buyers, each with its receipt, as one instance copied them.
#[derive(Debug, Default)]
pub struct BuyerCopy {
    pub buyers: HashMap<Box<str>, Option<Receipt>>,
    /// Every copied order was confirmed: the copy is final.
    pub settled: bool,
}

/// Most sales of one group [`Sales::group_orders`] reads (a group is a product's sizes or colours).
pub const MAX_GROUP_SALES: usize = 100;

impl Sales {
    /// What Redis knows of `user`'s purchase in `sale`: each shard's buyer set and receipt in one
    /// MULTI, then, for the buyer's receipt, whether its stream entry is still queued (and, for a
    /// queued reservation, its deadline, which the entry carries).
    pub async fn purchase_of(&self, sale: &SaleId, user: &UserId) -> RedisResult<Purchase> {
        let Some(layout) = self.layout(sale).await? else {
            return Ok(Purchase::UnknownSale);
        };
        let keys = layout.keys(self.redis.prefix(), sale);
        let found = try_join_all(keys.iter().map(|k| self.buyer_in_shard(k, user))).await?;
        let Some((keys, receipt)) = keys.iter().zip(found).find_map(|(k, found)| found.map(|r| (k, r))) else {
            return Ok(Purchase::NotBought);
        };
        let Some(receipt) = receipt else {
            return Ok(Purchase::Bought(None));
        };
        let stored = StoredReceipt::parse(&receipt).map_err(|why| unexpected_reply("the receipts hash", &why))?;
        let (ms, seq) = stored.entry;
        let entry = format!("{ms}-{seq}");
        let queued: Vec<(String, Vec<(String, String)>)> =
            redis::cmd("XRANGE").arg(&keys.orders).arg(&entry).arg(&entry).query_async(&mut self.redis.conn()).await?;
        let Some((_, fields)) = queued.first() else {
            return Ok(Purchase::Bought(Some(stored.with_status(OrderStatus::Confirmed))));
        };
        let pay_by_ms = match fields.iter().find(|(field, _)| field == order_stream::PAY_BY_MS) {
            None => None,
            Some((_, ms)) => Some(ms.parse().map_err(|_| unexpected_reply("an order entry's pay_by_ms", ms))?),
        };
        Ok(Purchase::Bought(Some(Receipt { pay_by_ms, ..stored.with_status(OrderStatus::Queued) })))
    }

    /// `user`'s orders in the sales of `sale`'s group (none for a sale without a group), as their
    /// receipts say (status `Queued` or `Confirmed` is not looked up: `Confirmed` for all), in
    /// one call on the group's slot: what a `limit_reached` refusal shows the buyer. At most
    /// [`MAX_GROUP_SALES`] sales are read.
    pub async fn group_orders(&self, sale: &SaleId, user: &UserId) -> RedisResult<Vec<(SaleId, Receipt)>> {
        let keys = self.redis.sale_keys(sale);
        if sale.group().is_none() {
            return Ok(Vec::new());
        }
        let sales: Vec<String> = redis::cmd("SRANDMEMBER")
            .arg(&keys.group_sales)
            .arg(MAX_GROUP_SALES)
            .query_async(&mut self.redis.conn())
            .await?;
        let mut sales: Vec<SaleId> = sales.iter().filter_map(|id| SaleId::parse(id).ok()).collect();
        sales.sort_unstable_by(|a, b| a.as_str().cmp(b.as_str()));
        let mut pipe = redis::pipe();
        for sale in &sales {
            pipe.hget(self.redis.sale_keys(sale).receipts, user.as_str());
        }
        let receipts: Vec<Option<String>> = pipe.query_async(&mut self.redis.conn()).await?;
        Ok(sales
            .into_iter()
            .zip(receipts)
            .filter_map(|(sale, receipt)| {
                let stored = StoredReceipt::parse(&receipt?).ok()?;
                Some((sale, stored.with_status(OrderStatus::Confirmed)))
            })
            .collect())
    }

    /// A copy of the sale's buyers and their receipts (for the sold-out flag), unless it has more
    /// than `limit` buyers; and whether every copied order was confirmed. An order counts as
    /// confirmed when its entry is older than the oldest entry of its stream, read after its
    /// receipt (entries leave a stream only after their commit, oldest first but not strictly);
    /// any other counts as queued, so the copy can be late to say "confirmed" but never early.
    pub async fn buyer_copy(&self, sale: &SaleId, limit: u64) -> RedisResult<Option<BuyerCopy>> {
        let keys = self.all_shard_keys(sale).await?;
        if self.count_buyers(&keys).await? > limit {
            return Ok(None);
        }
        let mut copy = BuyerCopy { buyers: HashMap::new(), settled: true };
        for keys in &keys {
            self.scan(&keys.buyers, "SSCAN", |user| {
                copy.buyers.insert(user.into(), None);
            })
            .await?;
            let mut stored = Vec::new();
            let mut field = None;
            self.scan(&keys.receipts, "HSCAN", |word| match field.take() {
                None => field = Some(word),
                Some(user) => stored.push((user, word)),
            })
            .await?;
            let oldest: Vec<(String, Vec<(String, String)>)> = redis::cmd("XRANGE")
                .arg(&keys.orders)
                .arg("-")
                .arg("+")
                .arg("COUNT")
                .arg(1)
                .query_async(&mut self.redis.conn())
                .await?;
            let oldest = oldest.first().and_then(|(id, _)| parse_entry_id(id));
            for (user, value) in stored {
                let receipt =
                    StoredReceipt::parse(&value).map_err(|why| unexpected_reply("the receipts hash", &why))?;
                let status = match oldest {
                    Some(oldest) if receipt.entry >= oldest => OrderStatus::Queued,
                    _ => OrderStatus::Confirmed,
                };
                copy.settled &= status == OrderStatus::Confirmed;
                copy.buyers.insert(user.into(), Some(receipt.with_status(status)));
            }
        }
        Ok(Some(copy))
    }

    /// `None` if `user` is not in this shard's buyer set, else its receipt, if it has one.
    async fn buyer_in_shard(&self, keys: &SaleKeys, user: &UserId) -> RedisResult<Option<Option<String>>> {
        let (bought, receipt): (bool, Option<String>) = redis::pipe()
            .atomic()
            .sismember(&keys.buyers, user.as_str())
            .hget(&keys.receipts, user.as_str())
            .query_async(&mut self.redis.conn())
            .await?;
        Ok(bought.then_some(receipt))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_receipt_written_reads_back_with_its_quantity() {
        let id = Uuid::parse_str("0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69").unwrap();
        for quantity in [1, 3, 100] {
            let value = StoredReceipt::value(id, 1_732_345_678_901, "1732345678901-7", quantity);
            let stored = StoredReceipt::parse(&value).unwrap();
            assert_eq!((stored.order_id, stored.entry, stored.quantity), (id, (1_732_345_678_901, 7), quantity));
        }
        assert!(!StoredReceipt::value(id, 1, "1-0", 1).ends_with(" 1"), "one unit is written as the scripts do");
    }

    #[test]
    fn a_stored_receipt_parses_and_refuses_anything_else() {
        let stored =
            StoredReceipt::parse("0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1732345678901 1732345678901-7").unwrap();
        assert_eq!(stored.created_at_ms, 1_732_345_678_901);
        assert_eq!(stored.entry, (1_732_345_678_901, 7));
        for bad in
            ["", "x 1 1-1", "0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1", "0190b7a2-6e4c-7cc2-8a3e-3f1d2c4b5a69 1 1-1 x"]
        {
            assert!(StoredReceipt::parse(bad).is_err(), "{bad:?}");
        }
        assert!((1, 9) < parse_entry_id("2-0").unwrap(), "entry ids order like the stream");
    }
}
