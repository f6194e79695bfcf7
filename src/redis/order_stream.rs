//! A sale's order stream, in one place: an entry's field names, [`encode`] (for the re-enqueues
//! of reconciliation) and [`decode`] (for the worker); and the consumer group the workers read it
//! with ([`CONSUMER_GROUP`], created only by [`create_group`]). The purchase itself appends its
//! entries in `lua/purchase.lua` (spliced into `lua/buy.lua` and `lua/buy_batch.lua`), which
//! cannot import these names:
//! `tests/api/order_entries.rs` reads the entries they write back and checks them against
//! [`PURCHASE_FIELDS`], and a test here that no other script writes to a stream.
//!
//! A purchase's entry id carries its time (`<created_at_ms>-*`), so the entry holds only the order
//! id and the buyer (the sale is its stream's); `created_at_ms` is a field only where the id
//! cannot carry the time: a purchase made after a later entry (the server's clock went back),
//! and a re-enqueued order.

use redis::RedisResult;
use redis::aio::ConnectionLike;
use redis::streams::StreamId;
use uuid::Uuid;

use super::lua;
use crate::domain::{Order, SaleId, UserId};

const ORDER_ID: &str = "order_id";
const USER_ID: &str = "user_id";
/// Redis server time of the purchase, Unix milliseconds, where the entry id does not carry it.
/// Read when present; without it the order's time is the entry id's milliseconds. (Entries of
/// earlier releases also have a `sale_id`, which is not read: the sale is the stream's.)
pub const CREATED_AT_MS: &str = "created_at_ms";
/// A reservation's deadline, Unix milliseconds (Redis time): only in a sale with a payment window.
pub const PAY_BY_MS: &str = "pay_by_ms";

/// Units bought, when more than one (without it: one).
pub const QUANTITY: &str = "quantity";

/// The purchase's W3C trace context, when traces are on (`crate::telemetry::traces`).
pub const TRACEPARENT: &str = "traceparent";

/// The consumer group every worker of every instance reads the order streams with.
pub const CONSUMER_GROUP: &str = "seckill-workers";

/// Creates the consumer group on `stream` (and the stream, if missing) unless it exists. The
/// group starts at the stream's first entry, so it also delivers orders appended before it was
/// created. The seed creates it before a shard can take orders; the worker only restores a
/// group on a stream that exists ([`restore_group`]).
pub async fn create_group(con: &mut impl ConnectionLike, stream: &str) -> RedisResult<()> {
    let mut create = redis::cmd("XGROUP");
    create.arg("CREATE").arg(stream).arg(CONSUMER_GROUP).arg("0").arg("MKSTREAM");
    match create.query_async(con).await {
        Err(err) if err.code() == Some("BUSYGROUP") => Ok(()),
        result => result,
    }
}

/// Creates the consumer group on `stream` again if it is missing, never the stream itself (no
/// `MKSTREAM`: the worker must not resurrect a stream that was deleted). True when it was
/// missing and is back; fails on a missing stream (`ERR ... no such key`) or any other error.
pub async fn restore_group(con: &mut impl ConnectionLike, stream: &str) -> RedisResult<bool> {
    let mut create = redis::cmd("XGROUP");
    create.arg("CREATE").arg(stream).arg(CONSUMER_GROUP).arg("0");
    match create.query_async::<()>(con).await {
        Ok(()) => Ok(true),
        Err(err) if err.code() == Some("BUSYGROUP") => Ok(false),
        Err(err) => Err(err),
    }
}

/// Acknowledges the entries `ids` of `stream` (their orders are committed), then trims the
/// entries the group is done with (`lua/trim.lua`). Returns how many were acknowledged.
pub async fn acknowledge(con: &mut impl ConnectionLike, stream: &str, ids: &[&str]) -> RedisResult<i64> {
    let acked: i64 = redis::cmd("XACK").arg(stream).arg(CONSUMER_GROUP).arg(ids).query_async(con).await?;
    trim(con, stream).await?;
    Ok(acked)
}

/// Deletes the entries of `stream` the group is done with (`lua/trim.lua`): delivered and
/// acknowledged, none pending before them. Returns how many.
pub async fn trim(con: &mut impl ConnectionLike, stream: &str) -> RedisResult<u64> {
    lua::run(lua::TRIM.key(stream).arg(CONSUMER_GROUP), con).await
}

/// The fields every purchase's entry starts with, in the order they are written; then
/// [`QUANTITY`] when over 1, [`PAY_BY_MS`] in a sale with a payment window, [`TRACEPARENT`] when traces are on.
pub const PURCHASE_FIELDS: [&str; 2] = [ORDER_ID, USER_ID];

/// The entry of `order` re-enqueued (its id will not carry its time), as XADD takes its fields.
pub fn encode(order: &Order) -> Vec<(&'static str, String)> {
    let mut fields = vec![
        (ORDER_ID, order.order_id.to_string()),
        (USER_ID, order.user_id.to_string()),
        (CREATED_AT_MS, order.created_at_ms.to_string()),
    ];
    if order.quantity > 1 {
        fields.push((QUANTITY, order.quantity.to_string()));
    }
    if let Some(pay_by_ms) = order.pay_by_ms {
        fields.push((PAY_BY_MS, pay_by_ms.to_string()));
    }
    fields
}

/// The order of one entry of `sale`'s stream; when a field is missing or invalid, that field's
/// name.
pub fn decode(entry: &StreamId, sale: &SaleId) -> Result<Order, &'static str> {
    let field = |name: &str| entry.get::<String>(name);
    let order_id = field(ORDER_ID).and_then(|s| Uuid::parse_str(&s).ok()).ok_or(ORDER_ID)?;
    let user_id = field(USER_ID).and_then(|s| UserId::stored(&s).ok()).ok_or(USER_ID)?;
    let created_at_ms = match field(CREATED_AT_MS) {
        Some(raw) => raw.parse().ok(),
        None => entry.id.split_once('-').and_then(|(ms, _)| ms.parse().ok()),
    }
    .ok_or(CREATED_AT_MS)?;
    let sale_id = sale.clone();
    let pay_by_ms = match field(PAY_BY_MS) {
        None => None,
        Some(raw) => Some(raw.parse().map_err(|_| PAY_BY_MS)?),
    };
    let quantity = match field(QUANTITY) {
        None => 1,
        Some(raw) => raw.parse().ok().filter(|q| (1..=crate::domain::MAX_PER_BUYER).contains(q)).ok_or(QUANTITY)?,
    };
    Ok(Order { order_id, sale_id, user_id, created_at_ms, pay_by_ms, quantity })
}

/// The user of an entry (`None` if it has no `user_id` field).
pub fn user(entry: &StreamId) -> Option<String> {
    entry.get(USER_ID)
}

/// The trace context of the purchase that wrote the entry, if traces were on.
pub fn traceparent(entry: &StreamId) -> Option<String> {
    entry.get(TRACEPARENT)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The code of a Lua script, without its `--` comment lines.
    fn lua_code(file: &str) -> String {
        let source = std::fs::read_to_string(format!("{}/lua/{file}", env!("CARGO_MANIFEST_DIR"))).unwrap();
        source.lines().filter(|l| !l.trim_start().starts_with("--")).collect::<Vec<_>>().join("\n")
    }

    #[test]
    fn only_the_purchase_and_draw_entry_scripts_append_to_a_stream() {
        for script in std::fs::read_dir(format!("{}/lua", env!("CARGO_MANIFEST_DIR"))).unwrap() {
            let file = script.unwrap().file_name().into_string().unwrap();
            let appends = lua_code(&file).contains("XADD");
            // lua/purchase.lua, the purchase's rules, is spliced into buy.lua and buy_batch.lua; a
            // draw's entry goes to its own entry stream.
            assert_eq!(appends, file == "purchase.lua" || file == "draw_enter.lua", "{file} and XADD");
        }
    }

    #[test]
    fn an_encoded_order_decodes_to_itself_and_a_bad_field_is_named() {
        let order = Order {
            order_id: Uuid::now_v7(),
            sale_id: SaleId::parse("s").unwrap(),
            user_id: UserId::parse("u").unwrap(),
            created_at_ms: 1_700_000_000_000,
            pay_by_ms: None,
            quantity: 3,
        };
        let entry = |fields: &[(&str, String)]| StreamId {
            map: fields.iter().map(|(k, v)| (k.to_string(), redis::Value::BulkString(v.clone().into()))).collect(),
            ..StreamId::default()
        };
        let sale = &order.sale_id;
        assert_eq!(decode(&entry(&encode(&order)), sale), Ok(order.clone()));
        let reserved = Order { pay_by_ms: Some(1_700_000_900_000), ..order.clone() };
        assert_eq!(decode(&entry(&encode(&reserved)), sale), Ok(reserved.clone()));
        assert_eq!(user(&entry(&encode(&order))).as_deref(), Some("u"));
        let mut bad = encode(&order);
        bad[1].1 = String::new();
        assert_eq!(decode(&entry(&bad), sale), Err(USER_ID));
        assert_eq!(decode(&StreamId::default(), sale), Err(ORDER_ID));

        // A purchase's entry (order id and user): its time is the entry id's, its sale the stream's,
        // one unit unless it says more.
        let short = [encode(&order)[0].clone(), encode(&order)[1].clone()];
        let purchased = StreamId { id: "1700000000000-3".into(), ..entry(&short) };
        assert_eq!(decode(&purchased, sale), Ok(Order { quantity: 1, ..order.clone() }));
        let many = [short[0].clone(), short[1].clone(), (QUANTITY, "3".into())];
        assert_eq!(decode(&StreamId { id: "1700000000000-3".into(), ..entry(&many) }, sale), Ok(order.clone()));
        for bad in ["0", "101", "x"] {
            let wrong = [short[0].clone(), short[1].clone(), (QUANTITY, bad.into())];
            assert_eq!(decode(&StreamId { id: "1700000000000-3".into(), ..entry(&wrong) }, sale), Err(QUANTITY));
        }
        // An entry of an earlier release also names its sale, which is not read.
        let mut earlier = encode(&order);
        earlier.insert(1, ("sale_id", "another".into()));
        assert_eq!(decode(&entry(&earlier), sale), Ok(order.clone()));
        let unnamed = StreamId { id: "x".into(), ..purchased };
        assert_eq!(decode(&unnamed, sale), Err(CREATED_AT_MS));
    }
}
