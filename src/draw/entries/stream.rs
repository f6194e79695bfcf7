//! A draw's entry stream (`lua/draw_enter.lua` appends, the order worker reads it with the order
//! streams' consumer group, `crate::redis::order_stream`): its entries' fields, and every
//! registered draw's stream.

use redis::streams::StreamId;
use redis::{AsyncCommands, RedisResult};

use super::MAX_SIZES;
use crate::domain::{DropId, MAX_PER_BUYER, UserId};
use crate::redis::Keyspace;
use crate::redis::keys::{DropKeys, draws_registry_key};
use crate::redis::order_stream;

/// An entry as the stream carries it, with its drop and buyer: what Postgres stores.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEntry {
    pub drop: DropId,
    pub user: UserId,
    /// Short size names, best first.
    pub sizes: Vec<String>,
    pub quantity: u32,
    pub entered_at_ms: i64,
}

/// The entry of one stream entry of `drop`'s draw; when a field is missing or invalid, its name.
pub fn decode(entry: &StreamId, drop: &DropId) -> Result<StoredEntry, &'static str> {
    let field = |name: &str| entry.get::<String>(name);
    let user = field("user_id").and_then(|s| UserId::stored(&s).ok()).ok_or("user_id")?;
    let sizes: Vec<String> = field("sizes").ok_or("sizes")?.split(',').map(str::to_owned).collect();
    if sizes.is_empty() || sizes.len() > MAX_SIZES || sizes.iter().any(|s| drop.size(s).is_err()) {
        return Err("sizes");
    }
    let quantity = field("quantity").and_then(|q| q.parse().ok()).filter(|q| (1..=MAX_PER_BUYER).contains(q));
    let entered_at_ms = field("entered_at_ms").and_then(|ms| ms.parse().ok()).ok_or("entered_at_ms")?;
    Ok(StoredEntry { drop: drop.clone(), user, sizes, quantity: quantity.ok_or("quantity")?, entered_at_ms })
}

/// The entry stream of every registered draw, with its drop, and the key whose absence means the
/// drop is gone (its draw meta).
pub async fn streams(redis: &Keyspace) -> RedisResult<Vec<(String, DropId, String)>> {
    let drops: Vec<String> = redis.conn().smembers(draws_registry_key(redis.prefix())).await?;
    Ok(drops
        .iter()
        .filter_map(|drop| DropId::parse(drop).ok())
        .map(|drop| {
            let keys = DropKeys::new(redis.prefix(), &drop);
            (keys.entry_stream, drop, keys.draw)
        })
        .collect())
}

/// Creates the draw's entry stream with its consumer group (kept if it exists).
pub async fn create_group(redis: &Keyspace, drop: &DropId) -> RedisResult<()> {
    order_stream::create_group(&mut redis.conn(), &DropKeys::new(redis.prefix(), drop).entry_stream).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_decodes_and_a_bad_field_is_named() {
        let drop = DropId::parse("kicks").unwrap();
        let entry = |fields: &[(&str, &str)]| StreamId {
            map: fields.iter().map(|(k, v)| (k.to_string(), redis::Value::BulkString(v.as_bytes().to_vec()))).collect(),
            ..StreamId::default()
        };
        let good = [("user_id", "ann"), ("sizes", "42,41"), ("quantity", "2"), ("entered_at_ms", "1700")];
        let stored = decode(&entry(&good), &drop).unwrap();
        assert_eq!(
            (stored.sizes.as_slice(), stored.quantity, stored.entered_at_ms),
            (&["42".into(), "41".into()][..], 2, 1700)
        );
        let mut bad = good;
        bad[2].1 = "0";
        assert_eq!(decode(&entry(&bad), &drop), Err("quantity"));
        bad = good;
        bad[1].1 = "42,";
        assert_eq!(decode(&entry(&bad), &drop), Err("sizes"));
        assert_eq!(decode(&StreamId::default(), &drop), Err("user_id"));
    }
}
