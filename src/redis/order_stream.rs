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
//! and a re-enqueued order. A call of several purchases (`lua/buy_batch.lua`) appends one entry
//! for all of them (issue 54): its [`ORDERS`] field has a line per order, and the fields the
//! call's orders share (the time, the payment deadline) once.

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

/// The orders of an entry of several purchases, instead of [`PURCHASE_FIELDS`]: one line each,
/// `<order id> <quantity> <traceparent, or -> <buyer>` (the buyer last: it may hold spaces, never
/// a line break, as a user id has no control character).
pub const ORDERS: &str = "orders";

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

/// Entries of `stream` the group delivered and no consumer acknowledged yet (0 without the
/// group or the stream): orders a worker holds, maybe committing them now.
pub async fn pending(con: &mut impl ConnectionLike, stream: &str) -> RedisResult<u64> {
    let reply: RedisResult<redis::Value> =
        redis::cmd("XPENDING").arg(stream).arg(CONSUMER_GROUP).query_async(con).await;
    match reply {
        Ok(redis::Value::Array(fields)) => {
            Ok(fields.first().and_then(|n| redis::from_redis_value_ref(n).ok()).unwrap_or(0))
        }
        Ok(_) => Ok(0),
        Err(err) if err.code() == Some("NOGROUP") => Ok(0),
        Err(err) => Err(err),
    }
}

/// Entries one `lua/trim.lua` call deletes at most (each call holds Redis briefly).
const TRIMMED_PER_CALL: u64 = 1_000;

/// Deletes the entries of `stream` the group is done with (`lua/trim.lua`): delivered and
/// acknowledged, none pending before them, [`TRIMMED_PER_CALL`] a call until none is left (a
/// worker acknowledges more entries a step than one call deletes). Returns how many.
pub async fn trim(con: &mut impl ConnectionLike, stream: &str) -> RedisResult<u64> {
    let mut call = lua::TRIM.key(stream);
    if let Some(meta) = meta_of(stream) {
        call.key(meta);
    }
    call.arg(CONSUMER_GROUP);
    let mut deleted = 0;
    loop {
        let now: u64 = lua::run(&call, con).await?;
        deleted += now;
        if now < TRIMMED_PER_CALL {
            return Ok(deleted);
        }
    }
}

/// The meta of an order stream's sale (its shard's): `<base>:orders` is beside `<base>:meta`
/// (`crate::redis::keys::SaleKeys`); `None` for another stream (a draw's entries).
fn meta_of(stream: &str) -> Option<String> {
    stream.strip_suffix(":orders").map(|base| format!("{base}:meta"))
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

/// The orders of one entry of `sale`'s stream (one, or an [`ORDERS`] entry's every order, in
/// their purchases' order), each, or the name of its field missing or invalid: a bad line of an
/// [`ORDERS`] entry is its own, the others stand. A field every order of the entry shares
/// missing or invalid (a one-order entry's own, the time, the payment deadline): its name.
pub type Decoded = Vec<Result<Order, &'static str>>;

/// The orders of one entry of `sale`'s stream, all of them, or the name of the first field
/// missing or invalid ([`decode_each`] for each order on its own).
pub fn decode(entry: &StreamId, sale: &SaleId) -> Result<Vec<Order>, &'static str> {
    decode_each(entry, sale)?.into_iter().collect()
}

/// [`Decoded`] of one entry of `sale`'s stream: what the worker stores.
pub fn decode_each(entry: &StreamId, sale: &SaleId) -> Result<Decoded, &'static str> {
    let field = |name: &str| entry.get::<String>(name);
    let part = |order_id: Option<&str>, user_id: Option<&str>, quantity: Option<&str>| {
        let order_id = order_id.and_then(|s| Uuid::parse_str(s).ok()).ok_or(ORDER_ID)?;
        let user_id = user_id.and_then(|s| UserId::stored(s).ok()).ok_or(USER_ID)?;
        let quantity = match quantity {
            None => 1,
            Some(raw) => raw.parse().ok().filter(|q| (1..=crate::domain::MAX_PER_BUYER).contains(q)).ok_or(QUANTITY)?,
        };
        Ok::<_, &'static str>((order_id, user_id, quantity))
    };
    let parts = match field(ORDERS) {
        None => vec![Ok(part(field(ORDER_ID).as_deref(), field(USER_ID).as_deref(), field(QUANTITY).as_deref())?)],
        Some(lines) => lines
            .split('\n')
            .map(|line| {
                let mut words = line.splitn(4, ' ');
                let (order_id, quantity, _trace, user) = (words.next(), words.next(), words.next(), words.next());
                part(order_id, user, Some(quantity.ok_or(QUANTITY)?))
            })
            .collect(),
    };
    let created_at_ms = match field(CREATED_AT_MS) {
        Some(raw) => raw.parse().ok(),
        None => entry.id.split_once('-').and_then(|(ms, _)| ms.parse().ok()),
    }
    .ok_or(CREATED_AT_MS)?;
    let pay_by_ms = match field(PAY_BY_MS) {
        None => None,
        Some(raw) => Some(raw.parse().map_err(|_| PAY_BY_MS)?),
    };
    let sale_id = sale.clone();
    Ok(parts
        .into_iter()
        .map(|part| {
            part.map(|(order_id, user_id, quantity)| Order {
                order_id,
                sale_id: sale_id.clone(),
                user_id,
                created_at_ms,
                pay_by_ms,
                quantity,
            })
        })
        .collect())
}

/// The users of an entry's orders (none if it has neither a `user_id` nor an [`ORDERS`] field).
pub fn users(entry: &StreamId) -> Vec<String> {
    match entry.get::<String>(ORDERS) {
        Some(lines) => lines.split('\n').filter_map(|line| line.splitn(4, ' ').nth(3)).map(str::to_owned).collect(),
        None => entry.get(USER_ID).into_iter().collect(),
    }
}

/// The trace contexts of the purchases that wrote the entry, where traces were on.
pub fn traceparents(entry: &StreamId) -> Vec<String> {
    match entry.get::<String>(ORDERS) {
        Some(lines) => lines
            .split('\n')
            .filter_map(|line| line.split(' ').nth(2))
            .filter(|trace| *trace != "-")
            .map(str::to_owned)
            .collect(),
        None => entry.get(TRACEPARENT).into_iter().collect(),
    }
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
        assert_eq!(decode(&entry(&encode(&order)), sale), Ok(vec![order.clone()]));
        let reserved = Order { pay_by_ms: Some(1_700_000_900_000), ..order.clone() };
        assert_eq!(decode(&entry(&encode(&reserved)), sale), Ok(vec![reserved.clone()]));
        assert_eq!(users(&entry(&encode(&order))), ["u"]);
        let mut bad = encode(&order);
        bad[1].1 = String::new();
        assert_eq!(decode(&entry(&bad), sale), Err(USER_ID));
        assert_eq!(decode(&StreamId::default(), sale), Err(ORDER_ID));

        // A purchase's entry (order id and user): its time is the entry id's, its sale the stream's,
        // one unit unless it says more.
        let short = [encode(&order)[0].clone(), encode(&order)[1].clone()];
        let purchased = StreamId { id: "1700000000000-3".into(), ..entry(&short) };
        assert_eq!(decode(&purchased, sale), Ok(vec![Order { quantity: 1, ..order.clone() }]));
        let many = [short[0].clone(), short[1].clone(), (QUANTITY, "3".into())];
        assert_eq!(decode(&StreamId { id: "1700000000000-3".into(), ..entry(&many) }, sale), Ok(vec![order.clone()]));
        for bad in ["0", "101", "x"] {
            let wrong = [short[0].clone(), short[1].clone(), (QUANTITY, bad.into())];
            assert_eq!(decode(&StreamId { id: "1700000000000-3".into(), ..entry(&wrong) }, sale), Err(QUANTITY));
        }
        // An entry of an earlier release also names its sale, which is not read.
        let mut earlier = encode(&order);
        earlier.insert(1, ("sale_id", "another".into()));
        assert_eq!(decode(&entry(&earlier), sale), Ok(vec![order.clone()]));
        let unnamed = StreamId { id: "x".into(), ..purchased };
        assert_eq!(decode(&unnamed, sale), Err(CREATED_AT_MS));
    }

    #[test]
    fn an_entry_of_several_purchases_decodes_to_each_order_in_order() {
        let sale = SaleId::parse("s").unwrap();
        let (first, second) = (Uuid::now_v7(), Uuid::now_v7());
        let traced = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";
        let lines = format!("{first} 1 - ann\n{second} 3 {traced} bob the builder");
        let fields = [(ORDERS, lines), (PAY_BY_MS, "1700000900000".into())];
        let entry = StreamId {
            id: "1700000000000-0".into(),
            map: fields.iter().map(|(k, v)| (k.to_string(), redis::Value::BulkString(v.clone().into()))).collect(),
            ..StreamId::default()
        };
        let order = |order_id, user: &str, quantity| Order {
            order_id,
            sale_id: sale.clone(),
            user_id: UserId::stored(user).unwrap(),
            created_at_ms: 1_700_000_000_000,
            pay_by_ms: Some(1_700_000_900_000),
            quantity,
        };
        assert_eq!(decode(&entry, &sale), Ok(vec![order(first, "ann", 1), order(second, "bob the builder", 3)]));
        assert_eq!(users(&entry), ["ann", "bob the builder"]);
        assert_eq!(traceparents(&entry), [traced]);
        for (bad, named) in [
            (format!("{first} 1 - "), USER_ID),
            (format!("{first} 0 - ann"), QUANTITY),
            (format!("{first} 1"), USER_ID),
            ("x 1 - ann".to_owned(), ORDER_ID),
        ] {
            let map = [(ORDERS.to_string(), redis::Value::BulkString(format!("{second} 1 - cy\n{bad}").into()))];
            let broken =
                StreamId { id: "1700000000000-0".into(), map: map.into_iter().collect(), ..StreamId::default() };
            assert_eq!(decode(&broken, &sale), Err(named), "{bad:?}");
            // Each on its own: the bad line is its own; the good one beside it stands.
            assert_eq!(
                decode_each(&broken, &sale),
                Ok(vec![Ok(Order { pay_by_ms: None, ..order(second, "cy", 1) }), Err(named)]),
                "{bad:?}"
            );
        }
    }
}
